package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/internal/testenv"
)

// Services in Python and Node.js write through the daemon's tables: on a
// database `courier migrate` prepared (on PostgreSQL that includes
// courier_write), each language's example program commits an order and
// its message, and a `courier relay` process publishes both, with their
// keys, types and the correlation id the programs set.
func TestOtherLanguagesThroughTheDaemon(t *testing.T) {
	py := testenv.Python(t)
	node, modules := testenv.Node(t)
	clients, err := filepath.Abs(filepath.Join("..", "..", "clients"))
	testenv.Must(t, err, "clients")
	// @courier-go/outbox, as npm installs it: a link in a node_modules.
	linked := filepath.Join(t.TempDir(), "node_modules")
	testenv.Must(t, os.MkdirAll(filepath.Join(linked, "@courier-go"), 0o755), "node_modules")
	testenv.Must(t, os.Symlink(filepath.Join(clients, "node"), filepath.Join(linked, "@courier-go", "outbox")), "link the package")

	databases := map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "shop.db") },
		"postgres": func(t *testing.T) string { return testenv.Postgres(t, nil).LibpqURL() },
	}
	for name, database := range databases {
		t.Run(name, func(t *testing.T) {
			url := database(t)
			if code, out, errOut := runCLI(t, "migrate", "--database-url", url); code != 0 {
				t.Fatalf("migrate: %d %q %q", code, out, errOut)
			}
			writers := []struct {
				order string
				cmd   *exec.Cmd
			}{
				{"order-py", exec.Command(py, filepath.Join(clients, "python", "examples", "place_order.py"), url, "order-py", "1999")},
				{"order-js", exec.Command(node, filepath.Join(clients, "node", "examples", "place_order.js"), url, "order-js", "2500")},
			}
			writers[0].cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(clients, "python"))
			writers[1].cmd.Env = testenv.NodeEnv(linked + string(os.PathListSeparator) + modules)
			for _, w := range writers {
				if out, err := w.cmd.CombinedOutput(); err != nil {
					t.Fatalf("%s: %v\n%s", w.cmd.Args[1], err, out)
				}
			}

			natsURL := testenv.NATSOrEmbedded(t)
			stream := testenv.Name("POLY")
			prefix := strings.ToLower(stream) + "."
			relay := exec.Command(os.Args[0], "relay")
			relay.Env = append(os.Environ(), "COURIER_TEST_BE_CLI=1", "COURIER_DATABASE_URL="+url, "COURIER_BROKER_URL="+natsURL,
				"COURIER_STREAM="+stream, "COURIER_SUBJECT_PREFIX="+prefix)
			var logs bytes.Buffer
			relay.Stderr = &logs
			testenv.Must(t, relay.Start(), "start relay")
			t.Cleanup(func() {
				_ = relay.Process.Signal(syscall.SIGTERM)
				_ = relay.Wait()
			})
			testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) {
				n := outboxStatus(t, url)["pending"]
				return n == 0, n
			}, "the relay did not publish the programs' messages; its log:\n%s", testenv.Lazy(func() any { return logs.String() }))

			nc := testenv.Connect(t, natsURL)
			js, err := jetstream.New(nc)
			testenv.Must(t, err, "jetstream")
			t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
			got := testenv.StreamMessages(t, nc, stream, couriernats.Config{SubjectPrefix: prefix})
			var keys []string
			for _, m := range got {
				keys = append(keys, m.Key)
				if m.Topic != "orders" || m.Type != "OrderPlaced" || m.ContentType != "application/json" ||
					m.Headers["Courier-Correlation-Id"] != "checkout-"+m.Key || !bytes.Contains(m.Payload, []byte(`"order_id"`)) {
					t.Errorf("message of %s: %+v", m.Key, m)
				}
			}
			slices.Sort(keys)
			if !slices.Equal(keys, []string{"order-js", "order-py"}) {
				t.Fatalf("the stream holds the messages of %v, want one of order-js and one of order-py", keys)
			}
		})
	}
}
