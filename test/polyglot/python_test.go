package polyglot

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/courier-go/courier/internal/testenv"
)

// python runs clients/python/tests/e2e_writer.py with the package on its
// path.
var python = writer{name: "python", command: func(t *testing.T) *exec.Cmd {
	py := testenv.Python(t)
	dir, err := filepath.Abs(filepath.Join("..", "..", "clients", "python"))
	testenv.Must(t, err, "clients/python")
	cmd := exec.Command(py, filepath.Join(dir, "tests", "e2e_writer.py"))
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir, "PYTHONDONTWRITEBYTECODE=1")
	return cmd
}}

// A Python program commits orders and messages with courier_outbox on
// each dialect; the Go relay and inbox consumer deliver exactly those.
func TestPython(t *testing.T) { forEachDialect(t, python) }
