package main

import (
	"io"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
)

// Every flag of every command can be set through the environment, with a
// COURIER_ variable named after it; one variable always means one flag.
func TestEveryFlagHasAnEnvironmentVariable(t *testing.T) {
	var c cli
	parser, err := kong.New(&c, kong.Name("courier"), kong.Writers(io.Discard, io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	byEnv := map[string]string{} // variable → flag name
	var walk func(n *kong.Node)
	walk = func(n *kong.Node) {
		for _, f := range n.Flags {
			if f.Name == "help" {
				continue
			}
			where := strings.TrimSpace("courier " + n.FullPath() + " --" + f.Name)
			if n.Type == kong.ApplicationNode {
				where = "courier --" + f.Name
			}
			if len(f.Envs) == 0 {
				t.Errorf("%s has no environment variable: add env:\"COURIER_…\" to its tag", where)
			}
			for _, v := range f.Envs {
				if !strings.HasPrefix(v, "COURIER_") {
					t.Errorf("%s: variable %s does not start with COURIER_", where, v)
				}
				if other, ok := byEnv[v]; ok && other != f.Name {
					t.Errorf("%s: variable %s already sets --%s elsewhere", where, v, other)
				}
				byEnv[v] = f.Name
			}
		}
		for _, child := range n.Children {
			walk(child)
		}
	}
	walk(parser.Model.Node)
	if len(byEnv) < 10 {
		t.Fatalf("found only %d variables: the walk missed the commands", len(byEnv))
	}
}

// A variable is read like its flag, and a bad value fails like one:
// COURIER_BATCH_SIZE=0 is refused rather than ignored.
func TestEnvironmentVariablesAreRead(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv("COURIER_BATCH_SIZE", "0")
	code, _, stderr := runCLI(t, "relay", "--database-url", "postgres://u@127.0.0.1:1/x", "--broker-url", "nats://127.0.0.1:1")
	if code != 1 || !strings.Contains(stderr, "--batch-size is 0") {
		t.Fatalf("COURIER_BATCH_SIZE=0: exit %d, %q; want it refused as --batch-size", code, stderr)
	}
}
