package nats_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/internal/testenv"
)

// readStream creates a memory stream of its own for the test, with cfg's
// limits, capturing the subjects under its own prefix and those of
// "<name>_OTHER.>" (a prefix no Courier mapping of the test uses).
func readStream(t *testing.T, nc *natsgo.Conn, cfg jetstream.StreamConfig) (string, couriernats.Config) {
	t.Helper()
	js, err := jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	cfg.Name = testenv.Name("RB")
	mapping := couriernats.Config{SubjectPrefix: cfg.Name + "."}
	cfg.Subjects = []string{mapping.Subjects(), cfg.Name + "_OTHER.>"}
	cfg.Storage = jetstream.MemoryStorage
	_, err = js.CreateStream(context.Background(), cfg)
	testenv.Must(t, err, "create stream")
	t.Cleanup(func() { deleteStream(nc, cfg.Name) })
	return cfg.Name, mapping
}

func newReader(t *testing.T, nc *natsgo.Conn, stream string, mapping couriernats.Config) *couriernats.Reader {
	t.Helper()
	r, err := couriernats.NewReader(nc, couriernats.ReaderConfig{Config: mapping, Stream: stream})
	testenv.Must(t, err, "reader")
	return r
}

// readBack returns what r reads back over [from, to) and since.
func readBack(t *testing.T, r broker.Reader, from, to time.Time) ([]broker.Stored, time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []broker.Stored
	since, err := r.ReadBack(ctx, from, to, func(s broker.Stored) error {
		got = append(got, s)
		return nil
	})
	testenv.Must(t, err, "read back")
	return got, since
}

func publishStored(t *testing.T, pub broker.Publisher, msgs []courier.Message) {
	t.Helper()
	for i, err := range pub.Publish(context.Background(), msgs) {
		testenv.Must(t, err, fmt.Sprintf("publish message %d", i))
	}
}

// checkStored fails t unless got holds want's messages, in order, each
// decoded whole, in log stream at increasing offsets.
func checkStored(t *testing.T, got []broker.Stored, want []courier.Message, stream string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("read back %d messages, want %d: %+v", len(got), len(want), got)
	}
	for i, s := range got {
		w := want[i]
		if s.Err != nil || s.Message.ID != w.ID || s.Message.Topic != w.Topic || s.Message.Key != w.Key || s.Message.Type != w.Type ||
			string(s.Message.Payload) != string(w.Payload) {
			t.Errorf("message %d: read back %+v (err %v), want %s %s/%s %s", i, s.Message, s.Err, w.ID, w.Topic, w.Key, w.Type)
		}
		if s.Log != stream || s.At.IsZero() || i > 0 && (s.Offset <= got[i-1].Offset || s.At.Before(got[i-1].At)) {
			t.Errorf("message %d: log %q offset %d at %s after offset %d at %s", i, s.Log, s.Offset, s.At, got[max(i-1, 0)].Offset, got[max(i-1, 0)].At)
		}
	}
}

// within returns the messages of all stored in [from, to).
func within(all []broker.Stored, from, to time.Time) []courier.Message {
	var out []courier.Message
	for _, s := range all {
		if !s.At.Before(from) && s.At.Before(to) {
			out = append(out, s.Message)
		}
	}
	return out
}

// A stream's messages read back in order, whole, over a window: the
// messages of other prefixes left out, a message without Courier's headers
// passed with Err, a window that leaves the first ones out read from the
// middle, an empty window at once.
func TestReaderReadsBackAWindow(t *testing.T) {
	nc := testenv.Connect(t, testenv.NATSOrEmbedded(t))
	stream, mapping := readStream(t, nc, jetstream.StreamConfig{})
	pub := newPublisher(t, nc, mapping)
	r := newReader(t, nc, stream, mapping)
	ctx := context.Background()
	from := time.Now().Add(-time.Minute)

	var sent []courier.Message
	for i := range 6 {
		topic := []string{"orders", "payments"}[i%2]
		sent = append(sent, courier.NewMessage(topic, fmt.Sprintf("k-%d", i%3), fmt.Sprintf("Type%d", i), []byte(fmt.Sprint(i))))
	}
	publishStored(t, pub, sent[:3])
	publishStored(t, pub, sent[3:])
	js, err := jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	_, err = js.Publish(ctx, stream+"_OTHER.orders", []byte("not ours"))
	testenv.Must(t, err, "publish under another prefix")
	_, err = js.Publish(ctx, mapping.Subject("orders"), []byte("raw"))
	testenv.Must(t, err, "publish raw")

	all, since := readBack(t, r, from, time.Now().Add(time.Minute))
	if !since.IsZero() {
		t.Errorf("since %s, want zero: the stream holds all it stored", since)
	}
	if len(all) != len(sent)+1 {
		t.Fatalf("read back %d messages, want %d", len(all), len(sent)+1)
	}
	checkStored(t, all[:len(sent)], sent, stream)
	raw := all[len(sent)]
	if !errors.Is(raw.Err, courier.ErrMalformed) || raw.Message.Topic != "orders" || string(raw.Message.Payload) != "raw" || raw.Offset <= all[len(sent)-1].Offset {
		t.Errorf("message without Courier's headers: %+v, err %v; want ErrMalformed, topic orders, payload raw, offset after the rest", raw.Message, raw.Err)
	}

	// A window from the third message's time to the fifth's: the first
	// ones are left out.
	wfrom, wto := all[2].At, all[4].At
	got, _ := readBack(t, r, wfrom, wto)
	want := within(all, wfrom, wto)
	checkStored(t, got, want, stream)
	if len(want) == 0 || !all[0].At.Before(wfrom) {
		t.Fatalf("the window [%s, %s) leaves nothing or not the first message out: the stream's times are %v", wfrom, wto, all)
	}

	// Empty windows return at once.
	for _, w := range [][2]time.Time{{wfrom, wfrom}, {wto, wfrom}, {all[len(all)-1].At.Add(time.Nanosecond), time.Now().Add(time.Hour)}} {
		start := time.Now()
		if got, since := readBack(t, r, w[0], w[1]); len(got) != 0 || !since.IsZero() {
			t.Errorf("window [%s, %s): read back %d messages, since %s; want none", w[0], w[1], len(got), since)
		}
		if d := time.Since(start); d > 3*time.Second { // well under the 5s after which ReadBack asks whether anything is left
			t.Errorf("window [%s, %s): took %s to read nothing", w[0], w[1], d)
		}
	}
	// So does a stream with nothing under the prefix, and fn's error
	// ends the read.
	empty, emptyMapping := readStream(t, nc, jetstream.StreamConfig{})
	_, err = js.Publish(ctx, empty+"_OTHER.orders", []byte("not ours"))
	testenv.Must(t, err, "publish under another prefix")
	start := time.Now()
	if got, _ := readBack(t, newReader(t, nc, empty, emptyMapping), from, time.Now().Add(time.Hour)); len(got) != 0 || time.Since(start) > 3*time.Second {
		t.Errorf("stream without messages under the prefix: read back %d in %s", len(got), time.Since(start))
	}
	stop := errors.New("enough")
	n := 0
	if _, err := r.ReadBack(ctx, from, time.Now().Add(time.Hour), func(broker.Stored) error { n++; return stop }); err != stop || n != 1 {
		t.Errorf("fn's error: ReadBack returned %v after %d calls, want it after 1", err, n)
	}
	// Every read deleted its consumer.
	s, err := js.Stream(ctx, stream)
	testenv.Must(t, err, "stream")
	info, err := s.Info(ctx)
	testenv.Must(t, err, "stream info")
	if info.State.Consumers != 0 {
		t.Errorf("the stream has %d consumers left after the reads, want none", info.State.Consumers)
	}
}

// What a stream's limits removed moves since to the first message it
// holds; what a purge removed does not (the audit counts it lost), nor
// does a deletion from a stream without limits.
func TestReaderSinceAfterLimits(t *testing.T) {
	nc := testenv.Connect(t, testenv.NATSOrEmbedded(t))
	stream, mapping := readStream(t, nc, jetstream.StreamConfig{MaxMsgs: 3, Discard: jetstream.DiscardOld})
	pub := newPublisher(t, nc, mapping)
	r := newReader(t, nc, stream, mapping)
	from := time.Now().Add(-time.Minute)
	to := time.Now().Add(time.Hour)

	sent := run("k", 5)
	publishStored(t, pub, sent)
	got, since := readBack(t, r, from, to)
	checkStored(t, got, sent[2:], stream)
	if !since.Equal(got[0].At) || got[0].Offset != 3 {
		t.Errorf("since %s, first offset %d; want the first message held, %s at offset 3", since, got[0].Offset, got[0].At)
	}
	if _, since := readBack(t, r, got[0].At, to); !since.IsZero() {
		t.Errorf("read from the first message held: since %s, want zero", since)
	}

	js, err := jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	s, err := js.Stream(context.Background(), stream)
	testenv.Must(t, err, "stream")
	info, err := s.Info(context.Background())
	testenv.Must(t, err, "stream info")
	cfg := info.Config
	cfg.MaxMsgs = -1
	_, err = js.UpdateStream(context.Background(), cfg)
	testenv.Must(t, err, "lift the limit")
	testenv.Must(t, s.Purge(context.Background()), "purge")
	if none, since := readBack(t, r, from, to); len(none) != 0 || !since.IsZero() {
		t.Errorf("purged stream without limits: read back %d, since %s; want none, since zero", len(none), since)
	}

	plain, plainMapping := readStream(t, nc, jetstream.StreamConfig{})
	publishStored(t, newPublisher(t, nc, plainMapping), run("k", 3))
	plainStream, err := js.Stream(context.Background(), plain)
	testenv.Must(t, err, "stream")
	testenv.Must(t, plainStream.DeleteMsg(context.Background(), 1), "delete the first message")
	if got, since := readBack(t, newReader(t, nc, plain, plainMapping), from, to); len(got) != 2 || !since.IsZero() {
		t.Errorf("stream without limits, first message deleted: read back %d, since %s; want 2, since zero", len(got), since)
	}
}

// A stream that removes what is consumed, or that does not exist, is
// refused with its name.
func TestReaderRefusesStreams(t *testing.T) {
	nc := testenv.Connect(t, testenv.NATSOrEmbedded(t))
	ctx := context.Background()
	for _, retention := range []jetstream.RetentionPolicy{jetstream.WorkQueuePolicy, jetstream.InterestPolicy} {
		stream, mapping := readStream(t, nc, jetstream.StreamConfig{Retention: retention})
		_, err := newReader(t, nc, stream, mapping).ReadBack(ctx, time.Time{}, time.Now(), func(broker.Stored) error { return nil })
		if err == nil || !strings.Contains(err.Error(), stream) || !strings.Contains(err.Error(), "cannot be audited") {
			t.Errorf("%s stream: %v; want an error naming the stream and saying it cannot be audited", retention, err)
		}
	}
	missing := testenv.Name("MISSING")
	_, err := newReader(t, nc, missing, couriernats.Config{}).ReadBack(ctx, time.Time{}, time.Now(), func(broker.Stored) error { return nil })
	if !errors.Is(err, jetstream.ErrStreamNotFound) || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "check the stream name") {
		t.Errorf("missing stream: %v", err)
	}
	for _, cfg := range []couriernats.ReaderConfig{{}, {Stream: "a.b"}, {Stream: "S", Config: couriernats.Config{SubjectPrefix: "x.*."}}} {
		if _, err := couriernats.NewReader(nc, cfg); err == nil || cfg.Validate() == nil || err.Error() != cfg.Validate().Error() {
			t.Errorf("NewReader(%+v): %v", cfg, err)
		}
	}
}
