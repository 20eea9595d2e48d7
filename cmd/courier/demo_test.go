package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/cmd/courier/internal/shop"
	"github.com/courier-go/courier/internal/testenv"
)

// courier demo never deletes what it did not make: a --data-dir (or
// COURIER_DEMO_DATA_DIR) that holds files of its own is refused, with
// the flag and the fix; a directory the demo made is reused, and only the
// demo's own files in it are replaced.
func TestDemoDataDirKeepsOthersFiles(t *testing.T) {
	dir := t.TempDir()
	theirs := filepath.Join(dir, "theirs")
	testenv.Must(t, os.MkdirAll(filepath.Join(theirs, "sub"), 0o755), "mkdir")
	testenv.Must(t, os.WriteFile(filepath.Join(theirs, "important.txt"), []byte("keep me"), 0o644), "write")
	file := filepath.Join(dir, "a-file")
	testenv.Must(t, os.WriteFile(file, []byte("keep me too"), 0o644), "write")

	for _, c := range []struct {
		args []string
		env  string
		want []string
	}{
		{[]string{"--data-dir", theirs}, "", []string{"--data-dir", theirs, "important.txt", "did not create", "new or empty directory"}},
		{[]string{"--data-dir", theirs, "--keep"}, "", []string{"--data-dir", "did not create"}},
		{nil, theirs, []string{"COURIER_DEMO_DATA_DIR", "did not create"}},
		{[]string{"--data-dir", file}, "", []string{"--data-dir", "not a directory"}},
	} {
		if c.env != "" {
			t.Setenv("COURIER_DEMO_DATA_DIR", c.env)
		}
		code, _, errOut := runCLI(t, append([]string{"demo", "--orders", "5", "--crash", "none"}, c.args...)...)
		os.Unsetenv("COURIER_DEMO_DATA_DIR")
		for _, w := range c.want {
			if code != 1 || !strings.Contains(errOut, w) {
				t.Errorf("demo %v (COURIER_DEMO_DATA_DIR=%q): exit %d, %q; want exit 1 and an error with %q", c.args, c.env, code, errOut, w)
			}
		}
		if b, err := os.ReadFile(filepath.Join(theirs, "important.txt")); err != nil || string(b) != "keep me" {
			t.Fatalf("demo %v deleted or changed important.txt: %q, %v", c.args, b, err)
		}
		if left, _ := os.ReadDir(theirs); len(left) != 2 {
			t.Fatalf("demo %v changed the directory it refused: %v", c.args, left)
		}
		if b, err := os.ReadFile(file); err != nil || string(b) != "keep me too" {
			t.Fatalf("demo %v deleted or changed a file named as --data-dir: %q, %v", c.args, b, err)
		}
	}

	// A new directory is the demo's: a second run replaces its files and
	// leaves what was put next to them.
	mine := filepath.Join(dir, "mine")
	for i := range 2 {
		code, out, errOut := runCLI(t, "demo", "--orders", "5", "--crash", "none", "--data-dir", mine)
		if code != 0 || !strings.Contains(out, "All 8 invariants hold") {
			t.Fatalf("demo run %d in a directory of its own: exit %d\n%s\n%s", i, code, out, errOut)
		}
		if i == 0 {
			testenv.Must(t, os.WriteFile(filepath.Join(mine, "notes.txt"), []byte("mine"), 0o644), "write")
		}
	}
	if b, err := os.ReadFile(filepath.Join(mine, "notes.txt")); err != nil || string(b) != "mine" {
		t.Fatalf("the demo deleted a file it did not make from its own directory: %q, %v", b, err)
	}
	log, err := os.ReadFile(filepath.Join(mine, "demo.log"))
	testenv.Must(t, err, "read the log")
	if strings.Count(string(log), "demo starting") != 1 {
		t.Errorf("the second run did not start afresh: its log holds the first's too")
	}
}

// On an external broker courier demo deletes only what it created, in this
// run or (for a NATS stream, which can carry its mark) in an earlier one:
// a stream, topics or queues of the same names that it cannot tell it
// made are refused, and left as they are.
func TestDemoLeavesOthersBrokerObjects(t *testing.T) {
	// The test environment's NATS server, which may be older than 2.10
	// (the instances then share durable consumers), and a current one
	// (they share the keys over partition streams, which are the demo's
	// too).
	t.Run("nats", func(t *testing.T) { demoLeavesOthersStreams(t, testenv.NATSOrEmbedded(t)) })
	t.Run("nats-partitions", func(t *testing.T) { demoLeavesOthersStreams(t, testenv.EmbeddedNATS(t).ClientURL()) })

	t.Run("kafka", func(t *testing.T) {
		theirs := demoSubjectPrefix + shop.TopicPayment
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(2), kfake.SeedTopics(1, theirs))
		testenv.Must(t, err, "kfake")
		t.Cleanup(c.Close)
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
		testenv.Must(t, err, "client")
		t.Cleanup(cl.Close)
		ctx := context.Background()
		testenv.Must(t, cl.ProduceSync(ctx, &kgo.Record{Topic: theirs, Value: []byte("theirs")}).FirstErr(), "produce")
		brokerURL := "kafka://" + strings.Join(c.ListenAddrs(), ",")

		code, _, errOut := runCLI(t, "demo", "--broker", "kafka", "--orders", "5", "--crash", "none", "--data-dir", t.TempDir(), "--broker-url", brokerURL)
		if code != 1 || !strings.Contains(errOut, theirs) || !strings.Contains(errOut, "did not create") {
			t.Errorf("demo on a topic of another's: exit %d, %q; want exit 1 naming the topic", code, errOut)
		}
		topics := func() []string {
			t.Helper()
			meta, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
			testenv.Must(t, err, "metadata")
			var names []string
			for _, mt := range meta.Topics {
				if mt.Topic != nil && strings.HasPrefix(*mt.Topic, demoSubjectPrefix) {
					names = append(names, *mt.Topic)
				}
			}
			return names
		}
		if got := topics(); len(got) != 1 || got[0] != theirs {
			t.Fatalf("topics after the refused demo: %v, want only %s, theirs", got, theirs)
		}

		// On a cluster without them, the demo deletes at its end the
		// topics it made.
		c2, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(2))
		testenv.Must(t, err, "kfake")
		t.Cleanup(c2.Close)
		code, out, errOut := runCLI(t, "demo", "--broker", "kafka", "--orders", "5", "--crash", "none", "--data-dir", t.TempDir(),
			"--broker-url", "kafka://"+strings.Join(c2.ListenAddrs(), ","))
		if code != 0 || !strings.Contains(out, "All 8 invariants hold") {
			t.Fatalf("demo on an empty cluster: exit %d\n%s\n%s", code, out, errOut)
		}
	})
}

// On PostgreSQL courier demo drops only the schemas it created, in this
// run or in an earlier one (they carry its mark): a schema of the same name
// that it did not create is refused, and left as it is.
func TestDemoLeavesOthersSchemas(t *testing.T) {
	base := testenv.Need(t, testenv.EnvPostgres)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, base)
	testenv.Must(t, err, "connect")
	t.Cleanup(func() { admin.Close(context.Background()) })
	// The demo's schema names are fixed: none may be there before, and
	// the one this test makes is its own to drop.
	rows, err := admin.Query(ctx, `SELECT nspname FROM pg_namespace WHERE nspname LIKE 'courier\_demo\_%'`)
	testenv.Must(t, err, "list schemas")
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	testenv.Must(t, err, "list schemas")
	if len(left) > 0 {
		t.Fatalf("schemas %v are there before the test: drop them (an earlier run of the test was killed?)", left)
	}
	_, err = admin.Exec(ctx, `CREATE SCHEMA courier_demo_payment; CREATE TABLE courier_demo_payment.ledger (n int); INSERT INTO courier_demo_payment.ledger VALUES (42)`)
	testenv.Must(t, err, "their schema")
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), `DROP SCHEMA IF EXISTS courier_demo_payment CASCADE`) })

	code, _, errOut := runCLI(t, "demo", "--orders", "5", "--crash", "none", "--data-dir", t.TempDir(), "--database-url", base)
	if code != 1 || !strings.Contains(errOut, "--database-url") || !strings.Contains(errOut, "courier_demo_payment") || !strings.Contains(errOut, "did not create") {
		t.Errorf("demo on a schema of another's: exit %d, %q; want exit 1 naming --database-url and the schema", code, errOut)
	}
	var n int
	if err := admin.QueryRow(ctx, `SELECT n FROM courier_demo_payment.ledger`).Scan(&n); err != nil || n != 42 {
		t.Fatalf("their schema after the refused demo: %d, %v; want it as it was", n, err)
	}
	_, err = admin.Exec(ctx, `DROP SCHEMA courier_demo_payment CASCADE`)
	testenv.Must(t, err, "drop their schema")

	// The demo's own schemas, left by --keep, are the next run's to drop.
	t.Cleanup(func() {
		for _, s := range shop.Services {
			_, _ = admin.Exec(context.Background(), `DROP SCHEMA IF EXISTS courier_demo_`+s+` CASCADE`)
		}
	})
	for _, keep := range []bool{true, false} {
		args := []string{"demo", "--orders", "5", "--crash", "none", "--data-dir", t.TempDir(), "--database-url", base}
		if keep {
			args = append(args, "--keep")
		}
		code, out, errOut := runCLI(t, args...)
		if code != 0 || !strings.Contains(out, "All 8 invariants hold") {
			t.Fatalf("demo --keep=%v on PostgreSQL: exit %d\n%s\n%s", keep, code, out, errOut)
		}
		var n int
		testenv.Must(t, admin.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'courier\_demo\_%'`).Scan(&n), "count schemas")
		if keep && n != len(shop.Services) || !keep && n != 0 {
			t.Fatalf("after demo --keep=%v: %d schemas courier_demo_*, want %d", keep, n, map[bool]int{true: len(shop.Services)}[keep])
		}
	}
}

// demoLeavesOthersStreams runs the demo on the NATS server at natsURL: a
// stream of its name that it did not make, or a partition stream of its
// stream's that Courier did not make, is refused and left as it is; its own
// stream and partition streams, left by --keep, are the next run's to
// delete.
func demoLeavesOthersStreams(t *testing.T, natsURL string) {
	nc, err := natsgo.Connect(natsURL)
	testenv.Must(t, err, "connect")
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	ctx := context.Background()
	theirs, mine := strings.ToUpper(testenv.Name("THEIRS_")), strings.ToUpper(testenv.Name("DEMO_"))
	t.Cleanup(func() {
		for _, s := range []string{theirs, mine} {
			_ = js.DeleteStream(context.Background(), s)
		}
	})
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: theirs, Subjects: []string{strings.ToLower(theirs) + ".>"}})
	testenv.Must(t, err, "create their stream")
	_, err = js.Publish(ctx, strings.ToLower(theirs)+".x", []byte("theirs"))
	testenv.Must(t, err, "publish")

	code, _, errOut := runCLI(t, "demo", "--orders", "5", "--crash", "none", "--data-dir", t.TempDir(), "--broker-url", natsURL, "--stream", theirs)
	if code != 1 || !strings.Contains(errOut, "--stream") || !strings.Contains(errOut, theirs) || !strings.Contains(errOut, "did not create") {
		t.Errorf("demo on a stream of another's: exit %d, %q; want exit 1 naming --stream and the stream", code, errOut)
	}
	if info, err := js.Stream(ctx, theirs); err != nil || info.CachedInfo().State.Msgs != 1 {
		t.Fatalf("their stream after the refused demo: %v; want it as it was, with its message", err)
	}

	// A stream named as the partitions of a service's consumer, which
	// Courier did not make, is refused too.
	other := strings.ToUpper(testenv.Name("OTHER_"))
	theirParts := couriernats.PartitionStream(other, shop.Payment)
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), theirParts) })
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: theirParts, Subjects: []string{strings.ToLower(other) + ".keys.>"}})
	testenv.Must(t, err, "create their partition stream")
	code, _, errOut = runCLI(t, "demo", "--orders", "5", "--crash", "none", "--data-dir", t.TempDir(), "--broker-url", natsURL, "--stream", other)
	if code != 1 || !strings.Contains(errOut, theirParts) || !strings.Contains(errOut, "did not create") {
		t.Errorf("demo beside a partition stream of another's: exit %d, %q; want exit 1 naming the stream", code, errOut)
	}
	if _, err := js.Stream(ctx, theirParts); err != nil {
		t.Fatalf("their partition stream after the refused demo: %v", err)
	}
	if _, err := js.Stream(ctx, other); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("the refused demo made its stream: %v", err)
	}

	// The demo's own stream and its services' partition streams (on a
	// server that has them), left by --keep, are the next run's to delete.
	var parts []string
	for _, s := range shop.Services {
		parts = append(parts, couriernats.PartitionStream(mine, s))
	}
	t.Cleanup(func() {
		for _, s := range parts {
			_ = js.DeleteStream(context.Background(), s)
		}
	})
	partitioned := natsAtLeast210(nc.ConnectedServerVersion())
	for _, keep := range []bool{true, false} {
		args := []string{"demo", "--orders", "5", "--crash", "none", "--data-dir", t.TempDir(), "--broker-url", natsURL, "--stream", mine}
		if keep {
			args = append(args, "--keep")
		}
		code, out, errOut := runCLI(t, args...)
		if code != 0 || !strings.Contains(out, "All 8 invariants hold") {
			t.Fatalf("demo --keep=%v on its own stream: exit %d\n%s\n%s", keep, code, out, errOut)
		}
		_, err := js.Stream(ctx, mine)
		if keep && err != nil {
			t.Fatalf("demo --keep deleted its stream: %v", err)
		}
		if !keep && !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Fatalf("the demo left its stream behind: %v", err)
		}
		for _, p := range parts {
			_, err := js.Stream(ctx, p)
			if keep && partitioned && err != nil {
				t.Errorf("demo --keep deleted its partition stream %s, or made none: %v", p, err)
			}
			if (!keep || !partitioned) && !errors.Is(err, jetstream.ErrStreamNotFound) {
				t.Errorf("the demo left the partition stream %s behind, or made one on a server without partitions: %v", p, err)
			}
		}
		// The report says how the instances shared the messages: by
		// partition, or, on a server that cannot, on the durable consumer.
		want := "each service ran as 2 instances, sharing its keys over 8 partitions"
		if !partitioned {
			want = "each service ran as 2 instances, on its durable consumer, as nats-server " + nc.ConnectedServerVersion() + " cannot"
		}
		if !strings.Contains(out, want) {
			t.Errorf("demo on nats-server %s: the report lacks %q\n%s", nc.ConnectedServerVersion(), want, out)
		}
	}
}

// natsAtLeast210 reports whether a nats-server version shares keys by
// partition (2.10 or later).
func natsAtLeast210(v string) bool {
	var major, minor int
	_, err := fmt.Sscanf(v, "%d.%d", &major, &minor)
	return err == nil && (major > 2 || major == 2 && minor >= 10)
}
