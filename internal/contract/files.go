package contract

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
)

// Dir returns the directory of the vectors: testdata/contract/v1 at the
// repository's root.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "contract", fmt.Sprintf("v%d", Version))
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
