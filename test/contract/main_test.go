// Package contract generates the outbox contract's test vectors,
// testdata/contract/v1, from Go's own Validate, Writer, inserters and relay,
// and checks them: run with -update to write the files, without to compare
// them with what Go does now. A change that shows up here changes what every
// writer in every language must do (docs/contract.md says when that bumps
// the contract's version).
package contract

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/courier-go/courier/internal/contract"
	"github.com/courier-go/courier/internal/testenv"
)

var update = flag.Bool("update", false, "write the vector files of testdata/contract from what Go does")

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testenv.M(m), testenv.NATSServerLeaks...)
}

// golden writes v to the vector file name with -update, else fails when the
// file differs, naming the first line that does.
func golden(t *testing.T, name string, v any) {
	t.Helper()
	got, err := contract.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(contract.Dir(), name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v: run go test ./test/contract -update to write it", err)
	}
	sameJSON(t, name, got, want)
}

// sameJSON fails when got, what Go does now, differs from want, the vector
// file's what, naming the first line that does.
func sameJSON(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(gl) || i < len(wl); i++ {
		g, w := "(end)", "(end)"
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			t.Fatalf("%s differs from what Go does now, first at line %d:\n file: %.300s\n   go: %.300s\nIf the change is meant, run go test ./test/contract -update and read docs/contract.md on versions.", what, i+1, w, g)
		}
	}
}
