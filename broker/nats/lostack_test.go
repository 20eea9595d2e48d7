package nats_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/internal/testenv"
)

// ackScene is a current nats-server with a stream, and a proxy in front of
// it that can drop JetStream's answers to publishes or hold everything a
// client sends.
type ackScene struct {
	srv     *testenv.NATSProcess
	proxy   *testenv.NATSProxy
	admin   *natsgo.Conn
	mapping couriernats.Config
	stream  string
}

// newAckScene starts a server (a current nats-server: atomic batches)
// with a stream named stream, with cfg.
func newAckScene(t *testing.T, cfg couriernats.StreamConfig) *ackScene {
	t.Helper()
	srv := testenv.StartNATSServer(t, testenv.NATSServerConfig{})
	s := &ackScene{srv: srv, proxy: testenv.StartNATSProxy(t, strings.TrimPrefix(srv.URL, "nats://")),
		admin: testenv.Connect(t, srv.URL), mapping: couriernats.Config{SubjectPrefix: "acks."}, stream: cfg.Name}
	testenv.Must(t, couriernats.EnsureStream(context.Background(), s.admin, s.mapping, cfg), "ensure stream")
	return s
}

// publisher returns a Publisher connected through the proxy (or straight
// to the server, direct), of mode and with an AckTimeout of a second,
// having asked KeepsKeyOrder when the mode's runs is set and checked its
// answer.
func (s *ackScene) publisher(t *testing.T, mode publishMode, direct bool) *couriernats.Publisher {
	t.Helper()
	url := s.proxy.URL(t, s.srv.URL)
	if direct {
		url = s.srv.URL
	}
	nc, err := couriernats.Connect(url)
	testenv.Must(t, err, "connect")
	t.Cleanup(nc.Close)
	cfg := mode.cfg
	cfg.Config, cfg.AckTimeout = s.mapping, time.Second
	pub := mode.newPublisher(t, nc, cfg)
	if mode.runs && !pub.KeepsKeyOrder() {
		t.Fatalf("KeepsKeyOrder is false on nats-server %s", nc.ConnectedServerVersion())
	}
	return pub
}

// messages returns n messages of key k, in write order.
func messages(k string, n int) []courier.Message {
	msgs := make([]courier.Message, n)
	for i := range msgs {
		msgs[i] = courier.NewMessage("t", k, "T", fmt.Appendf(nil, "%s%d", k, i))
	}
	return msgs
}

// dropAnswer returns a filter for NATSProxy.DropAcks that drops the n-th
// answer to a publish that is not a duplicate's (1: the first), and only
// it.
func dropAnswer(n int) func(testenv.NATSAck) bool {
	var seen atomic.Int64
	return func(a testenv.NATSAck) bool {
		return !a.Duplicate && seen.Add(1) == int64(n)
	}
}

// An acknowledgement lost on its way (the message stored, the publisher
// never told) makes the publisher acknowledge that message only when it
// is published again, after later messages of its key: the order of
// acknowledgements is then not the order the stream holds, which is write
// order. An earlier version of TestStreamLeaderLossIsAnOutage compared the
// stream with the acknowledgements, and so reported "key k0 out of order"
// for a stream in write order; it handed the Publisher several messages of
// a key per call without asking KeepsKeyOrder, too, which no relay does
// (see rounds). This reproduces its failure, message for message.
func TestLostAckReordersAcknowledgementsNotTheStream(t *testing.T) {
	ctx := context.Background()
	s := newAckScene(t, couriernats.StreamConfig{Name: "LOSTACK"})
	pub := s.publisher(t, publishMode{}, false)
	msgs := messages("k0", 3)
	s.proxy.DropAcks(dropAnswer(2))
	errs := pub.Publish(ctx, msgs)
	if errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], broker.ErrUnavailable) {
		t.Fatalf("publish with the second acknowledgement lost: %v; want nil, broker.ErrUnavailable, nil", errs)
	}
	acked := []courier.Message{msgs[0], msgs[2]}
	s.proxy.DropAcks(nil)
	for _, err := range pub.Publish(ctx, msgs[1:2]) { // its retry
		testenv.Must(t, err, "publish the second message again")
	}
	acked = append(acked, msgs[1])
	if answers := s.proxy.Acks(); !answers[len(answers)-1].Duplicate {
		t.Fatalf("the retry was stored again (%+v); want a duplicate of the first copy", answers[len(answers)-1])
	}

	got := testenv.StreamMessages(t, s.admin, s.stream, s.mapping)
	if dups := testenv.CheckDelivery(t, msgs, got); dups != 0 || len(got) != len(msgs) {
		t.Fatalf("stream holds %d messages, %d duplicates; want %d in write order", len(got), dups, len(msgs))
	}
	// Compared with the acknowledgements, the same stream looks out of
	// order: what the fault test once reported.
	rec := testenv.Record(t)
	testenv.CheckDelivery(rec, acked, got)
	want := fmt.Sprintf("key k0 out of order: message %s at stream position 1 after position 2", msgs[1].ID)
	if f := rec.Failures(); len(f) != 1 || f[0] != want {
		t.Fatalf("checked against the acknowledgements: %q; want %q", f, want)
	}
}

// rounds catches a publisher that breaks broker.OrderKeeper's promise: one
// that acknowledges a key's later message in a call after an earlier one
// failed. Handed runs without having promised to keep them in order, the
// Publisher does exactly that when an answer is lost.
func TestRoundsCatchABrokenPromise(t *testing.T) {
	s := newAckScene(t, couriernats.StreamConfig{Name: "LOSTACK"})
	pub := s.publisher(t, publishMode{cfg: couriernats.PublisherConfig{NoAtomicBatches: true}}, false)
	s.proxy.DropAcks(dropAnswer(1))
	var progress atomic.Int64
	out := rounds{pub: pub, runs: true, most: 5, keys: 1, topic: "t"}.publish(context.Background(), 5, &progress)
	if len(out.broken) == 0 {
		t.Fatalf("no broken promise reported; the outcome: %+v", out)
	}
	t.Logf("reported: %s", out.broken)
}

// ackModes are the ways the relay hands a Publisher a key's messages
// (publishModes) on one server.
var ackModes = publishModes

// Whichever answer to a publish is lost (the first, second or third: a
// message's, or an atomic batch's commit), the publisher reports that
// message failed (broker.ErrUnavailable) and, in a key's run, every later
// message of its key in the call too; published again as the relay does,
// the stream holds each key's messages once and in write order. A lost
// answer is what a leader change or a dropped connection does to a publish
// that was stored.
func TestLostAckKeepsKeyOrder(t *testing.T) {
	for _, mode := range ackModes {
		for _, n := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("%s/answer %d lost", mode.name, n), func(t *testing.T) {
				s := newAckScene(t, couriernats.StreamConfig{Name: "LOSTACK"})
				pub := s.publisher(t, mode, false)
				s.proxy.DropAcks(dropAnswer(n))
				var progress atomic.Int64
				// Three keys of five messages: one call holds each key's
				// run, or each key's next message.
				out := rounds{pub: pub, runs: mode.runs, most: 15, keys: 3, topic: "t"}.publish(context.Background(), 15, &progress)
				checkRounds(t, s, out)
				if out.failed == 0 { // more may, on a slow machine: an answer later than AckTimeout
					t.Errorf("no publish failed; want the one whose answer was lost to")
				}
			})
		}
	}
}

// checkRounds checks what rounds.publish saw on s: every failure an
// outage, no call that broke a key's order, and the stream holding every
// message once in write order.
func checkRounds(t *testing.T, s *ackScene, out roundsOutcome) {
	t.Helper()
	for _, err := range out.wrong {
		t.Errorf("publish failed with an error that is not broker.ErrUnavailable: %v", err)
	}
	for _, b := range out.broken {
		t.Error(b)
	}
	got := testenv.StreamMessages(t, s.admin, s.stream, s.mapping)
	if dups := testenv.CheckDelivery(t, out.written, got); dups != 0 {
		t.Errorf("%d duplicates in the stream", dups)
	}
}

// A publish held on its way (the publisher's connection cut off, a server
// stalled) fails on the publisher's side after AckTimeout; the relay (or
// another relay, once the lease ended) publishes the key again on another
// connection, and the held copy reaches the server afterwards, after later
// messages of its key. Within the stream's duplicate window it is dropped
// as a duplicate, so the stream keeps write order; beyond it, it is
// stored again, after them: the bound docs/design.md ("Running on a NATS
// cluster") states, and consumers' inboxes apply such a copy once.
func TestHeldPublishLandsAsADuplicate(t *testing.T) {
	for _, mode := range ackModes {
		for _, beyond := range []bool{false, true} {
			name := mode.name + "/within the duplicate window"
			if beyond {
				name = mode.name + "/beyond the duplicate window"
			}
			t.Run(name, func(t *testing.T) {
				heldPublish(t, mode, beyond)
			})
		}
	}
}

// heldPublish publishes a key's first message (its first three, as a run,
// when the mode hands runs) through a frozen proxy, publishes the whole key
// again on another connection, thaws the proxy, and checks what the held
// copy became, with a duplicate window the held copy arrives within or,
// when beyond is set, after. A run in rounds sends only its first message
// before the proxy holds it; as an atomic batch, all three.
func heldPublish(t *testing.T, mode publishMode, beyond bool) {
	runs := mode.runs
	ctx := context.Background()
	window := time.Minute
	if beyond {
		window = 500 * time.Millisecond
	}
	s := newAckScene(t, couriernats.StreamConfig{Name: "HELD", Duplicates: window})
	held := s.publisher(t, mode, false)
	again := s.publisher(t, mode, true)
	// Warm up: the subject is bound for both, and a run learns whether the
	// stream takes atomic batches.
	warm := messages("w", 1)
	if runs {
		warm = messages("w", 2)
	}
	for _, pub := range []*couriernats.Publisher{held, again} {
		for _, err := range pub.Publish(ctx, warm) {
			testenv.Must(t, err, "warm-up publish")
		}
	}
	key := messages("k", 5)
	first := key[:1]
	if runs {
		first = key[:3]
	}
	sent := first[:1] // what reaches the proxy before it holds the rest
	if mode.batches {
		sent = first
	}
	answered := len(s.proxy.Acks())
	s.proxy.Freeze()
	for i, err := range held.Publish(ctx, first) {
		if !errors.Is(err, broker.ErrUnavailable) {
			t.Fatalf("held publish of message %d: %v; want broker.ErrUnavailable", i, err)
		}
	}
	// The key again, from the other connection: its run at once, or a
	// message a call.
	for rest := key; len(rest) > 0; {
		n := 1
		if runs {
			n = len(rest)
		}
		for i, err := range again.Publish(ctx, rest[:n]) {
			testenv.Must(t, err, fmt.Sprintf("publish message %d again", len(key)-len(rest)+i))
		}
		rest = rest[n:]
	}
	if beyond {
		time.Sleep(2 * window) // the stream forgets the ids it stored
	}
	s.proxy.Thaw()
	testenv.Eventually(t, 30*time.Second, func() bool { return len(s.proxy.Acks()) > answered },
		"the held publish got no answer after the proxy thawed")
	answer := s.proxy.Acks()[answered]
	got := testenv.StreamMessages(t, s.admin, s.stream, s.mapping)
	dups := testenv.CheckDelivery(t, append(warm, key...), got)
	t.Logf("the held publish's answer: %v; the stream holds %d messages, %d duplicates", answer, len(got), dups)
	switch {
	case beyond:
		// Stored again, after the key's last message.
		if answer.Error != nil || answer.Duplicate || dups != len(sent) {
			t.Errorf("held copy answered %v, %d duplicates in the stream; want it stored again, %d duplicates", answer, dups, len(sent))
		}
		for i, m := range got[len(got)-len(sent):] {
			if m.ID != sent[i].ID {
				t.Errorf("stream position %d holds %s; want the held copy of %s", len(got)-len(sent)+i, m.ID, sent[i].ID)
			}
		}
	case mode.batches:
		// The batch refused whole: it holds message ids the stream has.
		if answer.Error == nil || answer.Error.ErrCode != 10201 || dups != 0 {
			t.Errorf("held batch answered %v, %d duplicates in the stream; want error 10201 (a message id the stream holds), none", answer, dups)
		}
	default:
		if !answer.Duplicate || dups != 0 {
			t.Errorf("held publish answered %v, %d duplicates in the stream; want a duplicate, none", answer, dups)
		}
	}
}
