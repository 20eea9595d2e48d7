package nats_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/internal/testenv"
)

// currentServer returns the URL of a current nats-server: a process of the
// test when COURIER_TEST_NATS_SERVER is set, an embedded one (the same
// release, in process) otherwise.
func currentServer(t *testing.T) string {
	t.Helper()
	if os.Getenv(testenv.EnvNATSServer) != "" {
		return testenv.StartNATSServer(t, testenv.NATSServerConfig{}).URL
	}
	return testenv.EmbeddedNATS(t).ClientURL()
}

// atomicStream creates a stream of its own for the test with cfg's limits
// and returns its name and the subject mapping that leads to it.
func atomicStream(t *testing.T, nc *natsgo.Conn, cfg jetstream.StreamConfig) (string, couriernats.Config) {
	t.Helper()
	js, err := jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	cfg.Name = testenv.Name("AB")
	mapping := couriernats.Config{SubjectPrefix: cfg.Name + "."}
	cfg.Subjects = []string{mapping.Subjects()}
	cfg.Storage = jetstream.MemoryStorage
	cfg.Duplicates = 2 * time.Minute
	_, err = js.CreateStream(context.Background(), cfg)
	testenv.Must(t, err, "create stream")
	t.Cleanup(func() { deleteStream(nc, cfg.Name) })
	return cfg.Name, mapping
}

// newPublisher returns a Publisher that sends every run of several
// messages of a key as atomic batches, whatever they cost, for the tests of
// the batches themselves.
func newPublisher(t *testing.T, nc *natsgo.Conn, mapping couriernats.Config) *couriernats.Publisher {
	t.Helper()
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping})
	testenv.Must(t, err, "publisher")
	couriernats.BatchEveryRun(pub)
	return pub
}

// run returns n messages of key on topic "orders", payloads "0" to n-1.
func run(key string, n int) []courier.Message {
	msgs := make([]courier.Message, n)
	for i := range msgs {
		msgs[i] = courier.NewMessage("orders", key, "Numbered", []byte(strconv.Itoa(i)))
	}
	return msgs
}

// stored is one message as the stream holds it.
type stored struct {
	key, payload, batch string
}

// rawStream reads the whole stream in order, with the headers Courier's
// decoding leaves out (the batch id).
func rawStream(t *testing.T, nc *natsgo.Conn, stream string) []stored {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js, err := jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	s, err := js.Stream(ctx, stream)
	testenv.Must(t, err, "stream")
	info, err := s.Info(ctx)
	testenv.Must(t, err, "info")
	total := int(info.State.Msgs)
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	testenv.Must(t, err, "consumer")
	var out []stored
	for len(out) < total {
		batch, err := c.Fetch(min(1000, total-len(out)), jetstream.FetchMaxWait(time.Second))
		testenv.Must(t, err, "fetch")
		for m := range batch.Messages() {
			h := m.Headers()
			out = append(out, stored{key: h.Get(couriernats.HeaderKey), payload: string(m.Data()), batch: h.Get("Nats-Batch-Id")})
		}
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d messages", len(out), total)
		}
	}
	return out
}

// batchesOf counts the atomic batches key's stored messages came in, and
// its messages stored outside any batch.
func batchesOf(msgs []stored, key string) (batches, alone int) {
	seen := map[string]bool{}
	for _, m := range msgs {
		switch {
		case m.key != key:
		case m.batch == "":
			alone++
		case !seen[m.batch]:
			seen[m.batch] = true
			batches++
		}
	}
	return batches, alone
}

// inOrder fails t unless key's stored payloads are exactly want, in order.
func inOrder(t *testing.T, msgs []stored, key string, want []string) {
	t.Helper()
	var got []string
	for _, m := range msgs {
		if m.key == key {
			got = append(got, m.payload)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("key %s: stored %d messages %.200v…, want %d: %.200v…", key, len(got), got, len(want), want)
	}
}

func payloads(msgs []courier.Message) []string {
	out := make([]string, len(msgs))
	for i := range msgs {
		out[i] = string(msgs[i].Payload)
	}
	return out
}

// On a current server with a stream that allows atomic batches, the
// publisher keeps a key's order when pipelined, and a key's run of 2,500
// messages goes as three atomic batches (at most 1,000 messages each),
// while single messages of other keys go as they always did.
func TestAtomicBatchesCarryAKeysRun(t *testing.T) {
	nc := testenv.Connect(t, currentServer(t))
	stream, mapping := atomicStream(t, nc, jetstream.StreamConfig{AllowAtomicPublish: true})
	pub := newPublisher(t, nc, mapping)
	if !pub.KeepsKeyOrder() {
		t.Fatalf("KeepsKeyOrder on nats-server %s with allow_atomic: false, want true", nc.ConnectedServerVersion())
	}
	hot := run("hot", 2500)
	var msgs []courier.Message
	for i := range hot {
		msgs = append(msgs, hot[i])
		if i%100 == 0 {
			msgs = append(msgs, courier.NewMessage("orders", fmt.Sprintf("single-%d", i), "Numbered", []byte("0")))
		}
	}
	msgs = append(msgs, run("warm", 30)...)
	for i, err := range pub.Publish(context.Background(), msgs) {
		if err != nil {
			t.Fatalf("message %d (key %s): %v", i, msgs[i].Key, err)
		}
	}
	got := rawStream(t, nc, stream)
	if len(got) != len(msgs) {
		t.Fatalf("%d messages stored, want %d", len(got), len(msgs))
	}
	inOrder(t, got, "hot", payloads(hot))
	inOrder(t, got, "warm", payloads(run("warm", 30)))
	if batches, alone := batchesOf(got, "hot"); batches != 3 || alone != 0 {
		t.Fatalf("key hot: %d batches and %d messages alone, want 3 batches", batches, alone)
	}
	if batches, alone := batchesOf(got, "single-0"); batches != 0 || alone != 1 {
		t.Fatalf("a key's single message: %d batches, %d alone; want it alone", batches, alone)
	}
}

// With the default BatchTime, a call's runs are split where batches and
// rounds cost least together: a hot key's run of 600 and the next longest
// (200) as batches, a run of 20 and the two-message runs of 300 keys in
// rounds, one message per key per round trip; every key in order. (A fresh
// Publisher assumes a round trip of 0.15 ms until it has measured one, so
// a batch of 4 ms, weighed 5 ms, is worth 33: 2 × 33 + 20 round trips in
// all, against 600 in rounds only, or 3 × 33 + 2 with the run of 20
// batched too.)
func TestBatchTimeSplitsRuns(t *testing.T) {
	nc := testenv.Connect(t, currentServer(t))
	stream, mapping := atomicStream(t, nc, jetstream.StreamConfig{AllowAtomicPublish: true})
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping})
	testenv.Must(t, err, "publisher")
	if !pub.KeepsKeyOrder() {
		t.Fatalf("KeepsKeyOrder on nats-server %s with allow_atomic: false, want true", nc.ConnectedServerVersion())
	}
	runs := map[string][]courier.Message{"hot": run("hot", 600), "warm": run("warm", 200), "mild": run("mild", 20)}
	for k := range 300 {
		key := fmt.Sprintf("pair-%d", k)
		runs[key] = run(key, 2)
	}
	// Interleaved as writers interleave them: each key's next message in
	// turn.
	var msgs []courier.Message
	for n := 0; ; n++ {
		added := false
		for _, key := range slices.Sorted(maps.Keys(runs)) {
			if n < len(runs[key]) {
				msgs, added = append(msgs, runs[key][n]), true
			}
		}
		if !added {
			break
		}
	}
	for i, err := range pub.Publish(context.Background(), msgs) {
		if err != nil {
			t.Fatalf("message %d (key %s): %v", i, msgs[i].Key, err)
		}
	}
	got := rawStream(t, nc, stream)
	if len(got) != len(msgs) {
		t.Fatalf("%d messages stored, want %d", len(got), len(msgs))
	}
	want := map[string]int{"hot": 1, "warm": 1, "mild": 0, "pair-0": 0, "pair-299": 0}
	for key, batches := range want {
		inOrder(t, got, key, payloads(runs[key]))
		if b, alone := batchesOf(got, key); b != batches || alone != len(runs[key])*(1-batches) {
			t.Errorf("key %s: %d batches and %d messages alone, want %d batches", key, b, alone, batches)
		}
	}
}

// A batch the server refuses (the stream is full and discards new
// messages) stores nothing, and nothing of its key after it is stored:
// the first batch of the run is in the stream, the second is refused with an
// error that is not a rejection for good, and every later message of the
// key fails too.
func TestAtomicBatchRefusedHoldsTheRestOfItsKey(t *testing.T) {
	nc := testenv.Connect(t, currentServer(t))
	stream, mapping := atomicStream(t, nc, jetstream.StreamConfig{AllowAtomicPublish: true, MaxMsgs: 1500, Discard: jetstream.DiscardNew})
	pub := newPublisher(t, nc, mapping)
	if !pub.KeepsKeyOrder() {
		t.Fatal("KeepsKeyOrder: false, want true")
	}
	msgs := run("hot", 2500)
	errs := pub.Publish(context.Background(), msgs)
	for i, err := range errs {
		switch {
		case i < 1000 && err != nil:
			t.Fatalf("message %d, in the first batch: %v", i, err)
		case i >= 1000 && err == nil:
			t.Fatalf("message %d, after the refused batch: stored, want it failed", i)
		case i >= 1000 && broker.Permanent(err):
			t.Fatalf("message %d: %v; a full stream is no rejection for good", i, err)
		}
	}
	t.Logf("refused: %v", errs[1000])
	got := rawStream(t, nc, stream)
	inOrder(t, got, "hot", payloads(msgs[:1000]))
}

// A message the stream refuses for good (over its max_msg_size) in the
// middle of a key's run is rejected alone: the batch stops before it, and
// the rest of the run is stored after it, in order.
func TestAtomicBatchAroundAPoisonMessage(t *testing.T) {
	nc := testenv.Connect(t, currentServer(t))
	stream, mapping := atomicStream(t, nc, jetstream.StreamConfig{AllowAtomicPublish: true, MaxMsgSize: 4096})
	pub := newPublisher(t, nc, mapping)
	if !pub.KeepsKeyOrder() {
		t.Fatal("KeepsKeyOrder: false, want true")
	}
	msgs := run("hot", 40)
	msgs[17].Payload = make([]byte, 8192)
	errs := pub.Publish(context.Background(), msgs)
	var want []courier.Message
	for i, err := range errs {
		switch {
		case i == 17 && !errors.Is(err, broker.ErrRejected):
			t.Fatalf("oversize message: %v, want it rejected for good", err)
		case i != 17 && err != nil:
			t.Fatalf("message %d: %v", i, err)
		case i != 17:
			want = append(want, msgs[i])
		}
	}
	got := rawStream(t, nc, stream)
	inOrder(t, got, "hot", payloads(want))
	if batches, alone := batchesOf(got, "hot"); batches != 2 || alone != 0 {
		t.Fatalf("%d batches, %d messages alone; want two batches around the rejected message", batches, alone)
	}
}

// In rounds too (runs too short for an atomic batch to pay), a message
// the stream refuses for good is rejected alone and its key goes on past
// it, in order, while the other keys' runs are stored whole.
func TestRoundsAroundAPoisonMessage(t *testing.T) {
	nc := testenv.Connect(t, currentServer(t))
	stream, mapping := atomicStream(t, nc, jetstream.StreamConfig{AllowAtomicPublish: true, MaxMsgSize: 4096})
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping})
	testenv.Must(t, err, "publisher")
	if !pub.KeepsKeyOrder() {
		t.Fatal("KeepsKeyOrder: false, want true")
	}
	a, b := run("a", 6), run("b", 6)
	a[2].Payload = make([]byte, 8192)
	var msgs []courier.Message
	for i := range a {
		msgs = append(msgs, a[i], b[i])
	}
	errs := pub.Publish(context.Background(), msgs)
	for i, err := range errs {
		switch poison := msgs[i].ID == a[2].ID; {
		case poison && !errors.Is(err, broker.ErrRejected):
			t.Fatalf("oversize message: %v, want it rejected for good", err)
		case !poison && err != nil:
			t.Fatalf("message %d: %v", i, err)
		}
	}
	got := rawStream(t, nc, stream)
	inOrder(t, got, "a", payloads(slices.Delete(slices.Clone(a), 2, 3)))
	inOrder(t, got, "b", payloads(b))
	if batches, _ := batchesOf(got, "a"); batches != 0 {
		t.Fatalf("key a: %d atomic batches, want its run in rounds", batches)
	}
}

// JetStream refuses a whole atomic batch that holds a message id it has
// stored (within the duplicate window). A run published again after part of
// it was stored (a relay that crashed before it recorded the outcome) goes
// one by one through the duplicates, which are acknowledged and dropped,
// then in batches again: each message is stored once, in order.
func TestAtomicBatchDeduplicates(t *testing.T) {
	nc := testenv.Connect(t, currentServer(t))
	stream, mapping := atomicStream(t, nc, jetstream.StreamConfig{AllowAtomicPublish: true})
	pub := newPublisher(t, nc, mapping)
	if !pub.KeepsKeyOrder() {
		t.Fatal("KeepsKeyOrder: false, want true")
	}
	msgs := run("hot", 1000)
	for i, err := range pub.Publish(context.Background(), msgs[:300]) {
		testenv.Must(t, err, fmt.Sprintf("first publish, message %d", i))
	}
	for i, err := range pub.Publish(context.Background(), msgs) {
		testenv.Must(t, err, fmt.Sprintf("second publish, message %d", i))
	}
	got := rawStream(t, nc, stream)
	inOrder(t, got, "hot", payloads(msgs))
	batches, alone := batchesOf(got, "hot")
	if batches != 2 || alone != 1 {
		t.Fatalf("%d batches, %d messages alone; want the first batch, the first new message alone, then a batch", batches, alone)
	}
}

// A stream that no longer allows atomic publish, after the publisher
// promised to keep a key's order: the batch is refused, and the run goes
// one message after the other, in order.
func TestAtomicBatchStreamTurnedOff(t *testing.T) {
	nc := testenv.Connect(t, currentServer(t))
	stream, mapping := atomicStream(t, nc, jetstream.StreamConfig{AllowAtomicPublish: true})
	pub := newPublisher(t, nc, mapping)
	if !pub.KeepsKeyOrder() {
		t.Fatal("KeepsKeyOrder: false, want true")
	}
	msgs := run("hot", 50)
	for i, err := range pub.Publish(context.Background(), msgs[:10]) {
		testenv.Must(t, err, fmt.Sprintf("message %d", i))
	}
	js, err := jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	s, err := js.Stream(context.Background(), stream)
	testenv.Must(t, err, "stream")
	cfg := s.CachedInfo().Config
	cfg.AllowAtomicPublish = false
	_, err = js.UpdateStream(context.Background(), cfg)
	testenv.Must(t, err, "turn allow_atomic off")
	for i, err := range pub.Publish(context.Background(), msgs[10:]) {
		testenv.Must(t, err, fmt.Sprintf("message %d", 10+i))
	}
	got := rawStream(t, nc, stream)
	inOrder(t, got, "hot", payloads(msgs))
	if batches, alone := batchesOf(got, "hot"); batches != 1 || alone != 40 {
		t.Fatalf("%d batches, %d alone; want one batch, then 40 messages alone", batches, alone)
	}
}

// Where atomic batches are not to be had, KeepsKeyOrder is false and
// Publish works as it always did: on the machine's NATS 2.9 server, on a
// current server with a stream that does not allow atomic publish, and
// with PublisherConfig.NoAtomicBatches.
func TestNoAtomicBatchesFallBack(t *testing.T) {
	cases := []struct {
		name   string
		url    func(t *testing.T) string
		stream jetstream.StreamConfig
		off    bool
	}{
		{"server 2.9", func(t *testing.T) string { return testenv.NATS(t) }, jetstream.StreamConfig{}, false},
		{"stream without allow_atomic", currentServer, jetstream.StreamConfig{}, false},
		{"NoAtomicBatches", currentServer, jetstream.StreamConfig{AllowAtomicPublish: true}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nc := testenv.Connect(t, tc.url(t))
			stream, mapping := atomicStream(t, nc, tc.stream)
			pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping, NoAtomicBatches: tc.off})
			testenv.Must(t, err, "publisher")
			if pub.KeepsKeyOrder() {
				t.Fatalf("KeepsKeyOrder on nats-server %s: true, want false", nc.ConnectedServerVersion())
			}
			msgs := append(run("a", 20), run("b", 20)...)
			for i, err := range pub.Publish(context.Background(), msgs) {
				testenv.Must(t, err, fmt.Sprintf("message %d", i))
			}
			got := rawStream(t, nc, stream)
			inOrder(t, got, "a", payloads(msgs[:20]))
			if batches, _ := batchesOf(got, "a"); batches != 0 {
				t.Fatalf("%d atomic batches, want none", batches)
			}
		})
	}
}

// EnsureStream creates streams that allow atomic batches on servers that
// have them, unless told not to.
func TestEnsureStreamAllowsAtomicBatches(t *testing.T) {
	nc := testenv.Connect(t, currentServer(t))
	js, err := jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	for _, off := range []bool{false, true} {
		name := testenv.Name("ES")
		testenv.Must(t, couriernats.EnsureStream(context.Background(), nc, couriernats.Config{SubjectPrefix: name + "."},
			couriernats.StreamConfig{Name: name, Memory: true, NoAtomicBatches: off}), "ensure stream")
		t.Cleanup(func() { deleteStream(nc, name) })
		s, err := js.Stream(context.Background(), name)
		testenv.Must(t, err, "stream")
		if got := s.CachedInfo().Config.AllowAtomicPublish; got == off {
			t.Fatalf("NoAtomicBatches %v: allow_atomic %v", off, got)
		}
	}
}

// A server killed while several keys' runs are in flight in atomic batches:
// after it restarts, each key's stored messages are a prefix of its run,
// with no gap (a batch is stored whole or not at all, and no batch of a key
// is sent before the one before it is acknowledged), and every message
// Publish reported stored is there.
func TestAtomicBatchesServerKilled(t *testing.T) {
	srv := testenv.StartNATSServer(t, testenv.NATSServerConfig{})
	nc, err := couriernats.Connect(srv.URL)
	testenv.Must(t, err, "connect")
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	stream := testenv.Name("KB")
	mapping := couriernats.Config{SubjectPrefix: stream + "."}
	_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: stream, Subjects: []string{mapping.Subjects()}, Storage: jetstream.FileStorage, AllowAtomicPublish: true,
	})
	testenv.Must(t, err, "create stream")
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping, AckTimeout: 2 * time.Second})
	testenv.Must(t, err, "publisher")
	if !pub.KeepsKeyOrder() {
		t.Fatal("KeepsKeyOrder: false, want true")
	}
	const keys, perKey = 6, 8000
	var msgs []courier.Message
	for k := range keys {
		msgs = append(msgs, run(fmt.Sprintf("key-%d", k), perKey)...)
	}
	done := make(chan []error, 1)
	go func() { done <- pub.Publish(context.Background(), msgs) }() // it ends when the server dies
	s, err := js.Stream(context.Background(), stream)
	testenv.Must(t, err, "stream")
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) {
		info, err := s.Info(context.Background())
		if err != nil {
			return false, err.Error()
		}
		return info.State.Msgs >= 15000, info.State.Msgs
	}, "fewer than 15,000 messages stored")
	srv.Kill()
	errs := <-done
	srv.Start()

	check := testenv.Connect(t, srv.URL)
	testenv.Eventually(t, 30*time.Second, func() bool {
		cjs, err := jetstream.New(check)
		if err != nil {
			return false
		}
		_, err = cjs.Stream(context.Background(), stream)
		return err == nil
	}, "stream not back after the restart")
	got := rawStream(t, check, stream)
	stored := map[string]int{}
	for _, m := range got {
		if want := strconv.Itoa(stored[m.key]); m.payload != want {
			t.Fatalf("key %s: message %s stored after %d messages: a gap", m.key, m.payload, stored[m.key])
		}
		stored[m.key]++
	}
	failed := 0
	for k := range keys {
		key := fmt.Sprintf("key-%d", k)
		acked, held := 0, false
		for i, err := range errs[k*perKey : (k+1)*perKey] {
			switch {
			case err == nil && held:
				t.Fatalf("key %s: message %d stored after an earlier one failed", key, i)
			case err == nil:
				acked++
			case !held:
				t.Logf("key %s: message %d failed: %v", key, i, err)
				fallthrough
			default:
				held = true
				failed++
			}
		}
		if acked > stored[key] {
			t.Fatalf("key %s: %d messages acknowledged, %d stored", key, acked, stored[key])
		}
		t.Logf("key %s: %d acknowledged, %d stored", key, acked, stored[key])
	}
	if failed == 0 {
		t.Log("the publish ended before the kill: nothing failed")
	}
}

// A server whose batch limits are below the defaults (at most 100 messages
// in a batch, 2 batches open per stream): the publisher halves its batches
// until the server takes them, and a batch refused because too many are
// open waits and tries again; a key's messages are stored in order, none
// after one that failed, and no batch is larger than the server allows.
func TestAtomicBatchesWithinServerLimits(t *testing.T) {
	dir := t.TempDir()
	srv := testenv.StartNATSServer(t, testenv.NATSServerConfig{Extra: fmt.Sprintf(
		"jetstream {\n  store_dir: %q\n  limits { batch { max_msgs: 100, max_inflight_per_stream: 2 } }\n}\n", dir)})
	nc := testenv.Connect(t, srv.URL)
	stream, mapping := atomicStream(t, nc, jetstream.StreamConfig{AllowAtomicPublish: true})
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping, MaxBatches: 6})
	testenv.Must(t, err, "publisher")
	if !pub.KeepsKeyOrder() {
		t.Fatal("KeepsKeyOrder: false, want true")
	}
	const keys, perKey = 6, 450
	var msgs []courier.Message
	for k := range keys {
		msgs = append(msgs, run(fmt.Sprintf("key-%d", k), perKey)...)
	}
	errs := pub.Publish(context.Background(), msgs)
	got := rawStream(t, nc, stream)
	stored, size := map[string]int{}, map[string]int{}
	for _, m := range got {
		if want := strconv.Itoa(stored[m.key]); m.payload != want {
			t.Fatalf("key %s: message %s stored after %d messages", m.key, m.payload, stored[m.key])
		}
		stored[m.key]++
		if m.batch != "" {
			if size[m.batch]++; size[m.batch] > 100 {
				t.Fatalf("a batch of more than 100 messages stored, over the server's max_msgs")
			}
		}
	}
	failed := 0
	for k := range keys {
		key := fmt.Sprintf("key-%d", k)
		acked, held := 0, false
		for i, err := range errs[k*perKey : (k+1)*perKey] {
			switch {
			case err == nil && held:
				t.Fatalf("key %s: message %d stored after an earlier one failed", key, i)
			case err == nil:
				acked++
			case !errors.Is(err, broker.ErrUnavailable):
				t.Fatalf("key %s: message %d: %v; want broker.ErrUnavailable", key, i, err)
			default:
				if !held {
					t.Logf("key %s: message %d failed: %v", key, i, err)
				}
				held = true
				failed++
			}
		}
		if acked != stored[key] {
			t.Fatalf("key %s: %d acknowledged, %d stored", key, acked, stored[key])
		}
	}
	if len(size) > 2*keys*perKey/100 {
		t.Fatalf("%d batches for %d messages: batches halved below the server's limit", len(size), len(got))
	}
	if len(size) == 0 || failed == len(msgs) {
		t.Fatalf("%d batches stored, %d of %d messages failed", len(size), failed, len(msgs))
	}
	t.Logf("%d messages in %d batches, %d failed", len(got), len(size), failed)
}

// A message the client cannot send (a header name NATS does not allow) in
// the middle of a key's run: the batch is given up before its commit, so
// the server stores none of it, and the run goes one message after the
// other: that message is rejected for good, the rest stored in order.
func TestAtomicBatchUnsendableMessage(t *testing.T) {
	nc := testenv.Connect(t, currentServer(t))
	stream, mapping := atomicStream(t, nc, jetstream.StreamConfig{AllowAtomicPublish: true})
	pub := newPublisher(t, nc, mapping)
	if !pub.KeepsKeyOrder() {
		t.Fatal("KeepsKeyOrder: false, want true")
	}
	msgs := run("hot", 30)
	msgs[12].SetHeader("bad: name", "x")
	var want []courier.Message
	for i, err := range pub.Publish(context.Background(), msgs) {
		switch {
		case i == 12 && !broker.Permanent(err):
			t.Fatalf("message with a bad header name: %v, want it rejected for good", err)
		case i != 12 && err != nil:
			t.Fatalf("message %d: %v", i, err)
		case i != 12:
			want = append(want, msgs[i])
		}
	}
	got := rawStream(t, nc, stream)
	inOrder(t, got, "hot", payloads(want))
}
