package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier/internal/testenv"
)

// Every flag of every command can be set through the environment, with a
// COURIER_ variable named after it; one variable always means one flag.
func TestEveryFlagHasAnEnvironmentVariable(t *testing.T) {
	var c cli
	parser, err := kong.New(&c, kong.Name("courier"), kong.Writers(io.Discard, io.Discard), helpVars())
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

// Bad flags fail before anything happens: no database file, no data
// directory, no stream on the broker.
func TestRelayValidatesFlagsBeforeSideEffects(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, v := range []string{"COURIER_DATABASE_URL", "COURIER_BROKER_URL"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	for _, c := range []struct{ args, want string }{
		{"--lease=-5s", "--lease is -5s"},
		{"--poll-interval=-1s", "--poll-interval is -1s"},
		{"--batch-size=20000", "--batch-size is 20000"},
		{"--lease=1s", "--lease is 1s: use more than 1s"},
		{"--embedded-port=70000", "--embedded-port is 70000"},
		{"--stream=a.b", "--stream \"a.b\""},
		{"--subject-prefix=a.*.", "--subject-prefix \"a.*.\""},
		{"--mode=cdc", "--mode cdc reads PostgreSQL's write-ahead log"},
		{"--stream-replicas=0", "--stream-replicas is 0: use 1 to 5"},
		{"--mode=cdc --slot=Bad-Slot --database-url=postgres://127.0.0.1:1/x", "--slot \"Bad-Slot\""},
	} {
		code, _, stderr := runCLI(t, append([]string{"relay"}, strings.Fields(c.args)...)...)
		if code != 1 || !strings.Contains(stderr, c.want) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("relay %s: exit %d, %q; want one line with %q", c.args, code, stderr, c.want)
		}
		left, err := os.ReadDir(dir)
		testenv.Must(t, err, "read dir")
		for _, left := range left {
			t.Errorf("relay %s failed after creating %s", c.args, left.Name())
			testenv.Must(t, os.RemoveAll(left.Name()), "remove")
		}
	}

	natsURL := testenv.NATSOrEmbedded(t)
	stream := testenv.Name("CLIBAD")
	db := "sqlite://" + filepath.Join(t.TempDir(), "x.db")
	if code, _, stderr := runCLI(t, "migrate", "--database-url", db); code != 0 {
		t.Fatalf("migrate: %s", stderr)
	}
	code, _, stderr := runCLI(t, "relay", "--lease=-5s", "--database-url", db, "--broker-url", natsURL, "--stream", stream,
		"--subject-prefix", strings.ToLower(stream)+".")
	if code != 1 || !strings.Contains(stderr, "--lease is -5s") {
		t.Fatalf("relay --lease=-5s on NATS: exit %d, %q", code, stderr)
	}
	js, err := jetstream.New(testenv.Connect(t, natsURL))
	testenv.Must(t, err, "jetstream")
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
	if _, err := js.Stream(context.Background(), stream); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("stream %s exists after a refused --lease (err %v)", stream, err)
	}
}

// An unusable --data-dir is named at once, not blamed on the port after a
// wait.
func TestRelayUnusableDataDir(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, v := range []string{"COURIER_DATABASE_URL", "COURIER_BROKER_URL"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	testenv.Must(t, os.WriteFile("plain-file", nil, 0o644), "write file")
	start := time.Now()
	code, _, stderr := runCLI(t, "relay", "--embedded-port", "0", "--data-dir", "plain-file/nats")
	if code != 1 || !strings.Contains(stderr, "--data-dir") || !strings.Contains(stderr, "plain-file/nats") || strings.Contains(stderr, "port") {
		t.Fatalf("relay --data-dir under a file: exit %d, %q; want one line naming --data-dir and not the port", code, stderr)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("relay --data-dir under a file failed after %s; want at once", waited)
	}
}

// A stream whose subjects another stream already captures gets the flags
// that fix it, not a question about JetStream.
func TestRelayStreamOverlap(t *testing.T) {
	natsURL := testenv.NATSOrEmbedded(t)
	existing, ours := testenv.Name("CLIOVA"), testenv.Name("CLIOVB")
	prefix := strings.ToLower(existing) + "."
	js, err := jetstream.New(testenv.Connect(t, natsURL))
	testenv.Must(t, err, "jetstream")
	ctx := context.Background()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: existing, Subjects: []string{prefix + "orders"}, Storage: jetstream.MemoryStorage})
	testenv.Must(t, err, "create stream")
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), existing) })
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), ours) })

	db := "sqlite://" + filepath.Join(t.TempDir(), "x.db")
	if code, _, stderr := runCLI(t, "migrate", "--database-url", db); code != 0 {
		t.Fatalf("migrate: %s", stderr)
	}
	code, _, stderr := runCLI(t, "relay", "--database-url", db, "--broker-url", natsURL, "--stream", ours, "--subject-prefix", prefix)
	if code != 1 || !strings.Contains(stderr, existing) || !strings.Contains(stderr, "--stream "+existing) ||
		!strings.Contains(stderr, "--subject-prefix") || strings.Contains(stderr, "JetStream enabled") {
		t.Fatalf("relay into an overlapping stream: exit %d, %q; want the stream that overlaps and --stream/--subject-prefix", code, stderr)
	}
}
