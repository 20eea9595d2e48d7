package polyglot

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/courier-go/courier/internal/testenv"
)

// node runs clients/node/test/e2e_writer.js with the drivers of
// COURIER_TEST_NODE_MODULES on its NODE_PATH.
var node = writer{name: "node", command: func(t *testing.T) *exec.Cmd {
	bin, modules := testenv.Node(t)
	dir, err := filepath.Abs(filepath.Join("..", "..", "clients", "node"))
	testenv.Must(t, err, "clients/node")
	cmd := exec.Command(bin, filepath.Join(dir, "test", "e2e_writer.js"))
	cmd.Env = testenv.NodeEnv(modules)
	return cmd
}}

// A Node.js program commits orders and messages with @courier-go/outbox
// on each dialect; the Go relay and inbox consumer deliver exactly those.
func TestNode(t *testing.T) { forEachDialect(t, node) }
