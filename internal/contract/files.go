package contract

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Dir returns the directory of the vectors: testdata/contract/v1 at the
// repository's root, found from the working directory up (a test runs in
// its package's directory), so that it is found however the binary was
// built (-trimpath leaves no source paths in it). It returns the path
// below the working directory when no directory up holds one.
func Dir() string {
	rel := filepath.Join("testdata", "contract", fmt.Sprintf("v%d", Version))
	dir, err := os.Getwd()
	if err != nil {
		return rel
	}
	for {
		if info, err := os.Stat(filepath.Join(dir, rel)); err == nil && info.IsDir() {
			return filepath.Join(dir, rel)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return rel
		}
		dir = parent
	}
}

// Read decodes the vector file name of Dir into v, refusing members v does
// not know.
func Read(name string, v any) error {
	b, err := os.ReadFile(filepath.Join(Dir(), name))
	if err != nil {
		return fmt.Errorf("contract: %w", err)
	}
	if err := strictUnmarshal(b, v); err != nil {
		return fmt.Errorf("contract: %s: %w", name, err)
	}
	return nil
}

// Encode returns v as the vector files hold it: JSON indented by two
// spaces, <, > and & as they are, a line break at the end.
func Encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
