package brokertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
)

// The broker acknowledges every message of a call, and they all reach the
// destination.
func testPublishAndAck(t *testing.T, h Harness) {
	in := newInstance(t, h)
	msgs := []courier.Message{
		message(in, "a", []byte("one")),
		message(in, "b", []byte("two")),
		message(in, "a", []byte("three")),
	}
	publish(t, in.Publisher, msgs...)
	publish(t, in.Publisher, message(in, "c", []byte("four")))
	if in.Stored == nil && in.Subscribe == nil {
		return
	}
	got := stored(t, in, msgs)
	ids := map[[16]byte]bool{}
	for _, m := range got {
		ids[m.ID] = true
	}
	if len(ids) != 4 {
		t.Fatalf("the destination holds %d distinct messages, want 4", len(ids))
	}
}

// Payloads and headers come back byte for byte: every byte value, an empty
// payload, unicode keys and header values, and each of the message's fields.
func testRoundTrip(t *testing.T, h Harness) {
	in := newInstance(t, h)
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	at := time.Date(2026, 3, 14, 15, 9, 26, 535897000, time.UTC)
	msgs := []courier.Message{
		message(in, "bytes", all, courier.WithContentType(courier.ContentTypeBinary)),
		message(in, "empty", nil),
		message(in, "注文-42 ☕", []byte(`{"emoji":"🚚"}`),
			courier.WithContentType(courier.ContentTypeJSON), courier.WithVersion(7), courier.WithOccurredAt(at),
			courier.WithType("Bestellung.Aufgegeben"),
			courier.WithCorrelationID("corr-Ω"),
			courier.WithHeader("X-Unicode", "café ☕ 注文 \t tab"),
			courier.WithHeader("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
			courier.WithHeader("x-lower-case", "v")),
		message(in, "big", bytes.Repeat(all, 256)), // 64 KiB
	}
	publish(t, in.Publisher, msgs...)
	got := received(t, in, msgs)
	byID := map[[16]byte]courier.Message{}
	for _, m := range got {
		byID[m.ID] = m
	}
	for _, want := range msgs {
		m, ok := byID[want.ID]
		if !ok {
			t.Errorf("message %s (key %q) did not come back", want.ID, want.Key)
			continue
		}
		for _, diff := range differences(want, m) {
			t.Errorf("message with key %q: %s", want.Key, diff)
		}
	}
}

// differences lists how got differs from want.
func differences(want, got courier.Message) []string {
	var out []string
	check := func(field string, ok bool, w, g any) {
		if !ok {
			out = append(out, fmt.Sprintf("%s is %v, want %v", field, g, w))
		}
	}
	check("Topic", got.Topic == want.Topic, want.Topic, got.Topic)
	check("Key", got.Key == want.Key, want.Key, got.Key)
	check("Type", got.Type == want.Type, want.Type, got.Type)
	check("Version", got.Version == want.Version, want.Version, got.Version)
	check("ContentType", got.ContentType == want.ContentType, want.ContentType, got.ContentType)
	check("OccurredAt", got.OccurredAt.Equal(want.OccurredAt), want.OccurredAt, got.OccurredAt)
	if !bytes.Equal(got.Payload, want.Payload) {
		out = append(out, fmt.Sprintf("Payload differs: %d bytes, want %d (%s)", len(got.Payload), len(want.Payload), firstDiff(want.Payload, got.Payload)))
	}
	if !maps.Equal(got.Headers, want.Headers) && (len(got.Headers) > 0 || len(want.Headers) > 0) {
		out = append(out, fmt.Sprintf("Headers are %q, want %q", got.Headers, want.Headers))
	}
	return out
}

func firstDiff(want, got []byte) string {
	for i := range min(len(want), len(got)) {
		if want[i] != got[i] {
			return fmt.Sprintf("byte %d is %#x, want %#x", i, got[i], want[i])
		}
	}
	return "one is a prefix of the other"
}

// A message published twice is stored once where the broker claims Dedup.
func testDedup(t *testing.T, h Harness) {
	if !h.Features.Dedup {
		t.Skip("the broker does not claim Dedup")
	}
	in := newInstance(t, h)
	m := message(in, "k", []byte("once"))
	other := message(in, "k", []byte("other"))
	publish(t, in.Publisher, m)
	publish(t, in.Publisher, m, other) // a relay that crashed before marking m
	publish(t, in.Publisher, m)
	got := stored(t, in, []courier.Message{m, other})
	n := 0
	for _, g := range got {
		if g.ID == m.ID {
			n++
		}
	}
	if n != 1 || len(got) != 2 {
		t.Fatalf("published one message three times and another once: the destination holds %d copies of the first and %d messages in all, want 1 and 2", n, len(got))
	}
}

// An unreachable broker fails every message as an outage: each error wraps
// broker.ErrUnavailable and none wraps broker.ErrRejected, so the relay
// retries without counting and makes no dead letters. Publish returns
// within its context's time.
func testUnreachable(t *testing.T, h Harness) {
	in := newInstance(t, h)
	if in.Unreachable == nil {
		t.Skip("brokertest: the harness gives no Unreachable")
	}
	pub := in.Unreachable(t)
	msgs := []courier.Message{message(in, "a", []byte("x")), message(in, "b", []byte("y")), message(in, "a", []byte("z"))}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	errs := pub.Publish(ctx, msgs)
	took := time.Since(start)
	if len(errs) != len(msgs) {
		t.Fatalf("Publish of %d messages returned %d errors", len(msgs), len(errs))
	}
	for i, err := range errs {
		switch {
		case !errors.Is(err, broker.ErrUnavailable):
			t.Errorf("message %d: %v; want an error wrapping broker.ErrUnavailable", i, err)
		case errors.Is(err, broker.ErrRejected):
			t.Errorf("message %d: %v wraps broker.ErrRejected: an outage would make dead letters", i, err)
		}
	}
	if took > 15*time.Second {
		t.Errorf("Publish took %s against an unreachable broker with a 10s context", took)
	}
	t.Logf("unreachable: %v", errs[0])
}

// A message over the broker's size limit fails with an error that counts
// against it (and wraps ErrRejected where the broker says it is permanent);
// the messages around it are published.
func testOversize(t *testing.T, h Harness) {
	size := h.Features.OversizeBytes
	if size <= 0 {
		t.Skip("the broker declares no OversizeBytes")
	}
	in := newInstance(t, h)
	before, big, after := message(in, "k", []byte("before")), message(in, "big", make([]byte, size)), message(in, "k", []byte("after"))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	errs := in.Publisher.Publish(ctx, []courier.Message{before, big, after})
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("messages around the oversize one: %v, %v; want both published", errs[0], errs[2])
	}
	err := errs[1]
	switch {
	case err == nil:
		t.Fatalf("a %d-byte payload was published; the broker declares it refuses that size", size)
	case errors.Is(err, broker.ErrUnavailable):
		t.Fatalf("oversize message: %v wraps ErrUnavailable: it would be retried for ever", err)
	case h.Features.OversizeRejected && !errors.Is(err, broker.ErrRejected):
		t.Fatalf("oversize message: %v; want it to wrap ErrRejected, as the broker declares", err)
	case !h.Features.OversizeRejected && errors.Is(err, broker.ErrRejected):
		t.Fatalf("oversize message: %v wraps ErrRejected, but the broker declares it a counted failure", err)
	}
	if !strings.Contains(err.Error(), fmt.Sprint(size)) && !strings.Contains(strings.ToLower(err.Error()), "large") {
		t.Errorf("oversize message: %q says neither the size nor that it is too large", err)
	}
	t.Logf("oversize: %v", err)
	if in.Stored != nil || in.Subscribe != nil {
		if got := stored(t, in, []courier.Message{before, after}); len(got) != 2 {
			t.Fatalf("the destination holds %d messages, want the 2 around the oversize one", len(got))
		}
	}
}

// A delivery neither acknowledged nor dropped comes again to the next
// subscriber once the first is closed; Extend keeps it meanwhile.
func testUnackedRedelivered(t *testing.T, h Harness) {
	in := newInstance(t, h)
	m := message(in, "k", []byte("unacked"))
	publish(t, in.Publisher, m)
	first := subscribe(t, in)
	d, got := mustNext(t, first, "the published message")
	if got.ID != m.ID || d.Attempt() != 1 {
		t.Fatalf("first delivery: message %s attempt %d, want %s attempt 1", got.ID, d.Attempt(), m.ID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := d.Extend(ctx); err != nil {
		t.Fatalf("extend: %v", err)
	}
	first.close(t)

	second := subscribe(t, in)
	d2, again := mustNext(t, second, "the unacknowledged message again, after its subscriber closed")
	if again.ID != m.ID {
		t.Fatalf("redelivery: message %s, want %s", again.ID, m.ID)
	}
	switch {
	case h.Features.AttemptsSurviveClose && d2.Attempt() < 2:
		t.Fatalf("redelivery after close: attempt %d, want 2 or more (the broker counts attempts)", d2.Attempt())
	case d2.Attempt() < 1:
		t.Fatalf("redelivery after close: attempt %d", d2.Attempt())
	}
	ack(t, d2)
}

// Where the broker redelivers to an open subscriber, a delivery left
// unacknowledged comes again after RedeliversAfter with Attempt 2.
func testRedeliveredWhileOpen(t *testing.T, h Harness) {
	if h.Features.RedeliversAfter <= 0 {
		t.Skip("the broker redelivers only after Close")
	}
	in := newInstance(t, h)
	m := message(in, "k", []byte("slow"))
	publish(t, in.Publisher, m)
	s := subscribe(t, in)
	mustNext(t, s, "the published message") // and left unacknowledged
	start := time.Now()
	d2, again := mustNext(t, s, "the unacknowledged message again")
	if again.ID != m.ID || d2.Attempt() != 2 {
		t.Fatalf("redelivery: message %s attempt %d, want %s attempt 2", again.ID, d2.Attempt(), m.ID)
	}
	if took := time.Since(start); took < h.Features.RedeliversAfter/2 {
		t.Fatalf("redelivered after %s, the broker declares %s", took, h.Features.RedeliversAfter)
	}
	ack(t, d2)
}

// Retry redelivers the message after its delay, with Attempt counted up,
// and not before.
func testRetry(t *testing.T, h Harness) {
	in := newInstance(t, h)
	m := message(in, "k", []byte("retry me"))
	publish(t, in.Publisher, m)
	s := subscribe(t, in)
	d, _ := mustNext(t, s, "the published message")
	const delay = 400 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	start := time.Now()
	if err := d.Retry(ctx, delay); err != nil {
		t.Fatalf("retry: %v", err)
	}
	d2, again := mustNext(t, s, "the retried message")
	if took := time.Since(start); took < delay*3/4 {
		t.Errorf("redelivered %s after Retry(%s)", took, delay)
	}
	if again.ID != m.ID || d2.Attempt() != 2 {
		t.Fatalf("after Retry: message %s attempt %d, want %s attempt 2", again.ID, d2.Attempt(), m.ID)
	}
	if err := d2.Retry(ctx, 0); err != nil {
		t.Fatalf("retry at once: %v", err)
	}
	d3, _ := mustNext(t, s, "the message retried at once")
	if d3.Attempt() != 3 {
		t.Fatalf("after a second Retry: attempt %d, want 3", d3.Attempt())
	}
	ack(t, d3)
}

// An acknowledged or dropped delivery does not come again, neither to its
// subscriber nor to the next one; the messages after it do.
func testAckedNotRedelivered(t *testing.T, h Harness) {
	in := newInstance(t, h)
	acked, dropped := message(in, "k", []byte("acked")), message(in, "k", []byte("dropped"))
	publish(t, in.Publisher, acked, dropped)
	s := subscribe(t, in)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for range 2 {
		d, m := mustNext(t, s, "the published messages")
		var err error
		switch m.ID {
		case acked.ID:
			err = d.Ack(ctx)
		case dropped.ID:
			err = d.Drop(ctx)
		default:
			t.Fatalf("unexpected message %s", m.ID)
		}
		if err != nil {
			t.Fatalf("ack or drop: %v", err)
		}
	}
	if d := next(t, s, h.Features.RedeliversAfter+quiet); d != nil {
		m, _ := s.Decode(d.Raw())
		t.Fatalf("message %q (attempt %d) came again to its subscriber after Ack or Drop", m.Payload, d.Attempt())
	}
	s.close(t)
	later := message(in, "k", []byte("later"))
	publish(t, in.Publisher, later)
	s2 := subscribe(t, in)
	d, m := mustNext(t, s2, "the message published later")
	if m.ID != later.ID {
		t.Fatalf("the next subscriber got %q (attempt %d), want %q: an acknowledged or dropped message came again", m.Payload, d.Attempt(), later.Payload)
	}
	ack(t, d)
	if d := next(t, s2, quiet); d != nil {
		m, _ := s2.Decode(d.Raw())
		t.Fatalf("message %q came again after Ack or Drop", m.Payload)
	}
}

// The messages of each key, published by one publisher over several calls
// with the keys interleaved, reach the subscriber in publish order.
func testPerKeyOrder(t *testing.T, h Harness) {
	if !h.Features.PerKeyOrder {
		t.Skip("the broker does not claim PerKeyOrder")
	}
	in := newInstance(t, h)
	const keys, perKey, batch = 8, 40, 30
	var msgs []courier.Message
	for i := range perKey {
		for k := range keys {
			msgs = append(msgs, message(in, fmt.Sprintf("key-%d", k), []byte(fmt.Sprint(i))))
		}
	}
	for start := 0; start < len(msgs); start += batch {
		publish(t, in.Publisher, msgs[start:min(start+batch, len(msgs))]...)
	}
	s := subscribe(t, in)
	got := receive(t, s, msgs)
	next := map[string]int{}
	for _, m := range firstCopies(got) {
		want := fmt.Sprint(next[m.Key])
		if string(m.Payload) != want {
			t.Fatalf("key %s: got message %s, want %s next", m.Key, m.Payload, want)
		}
		next[m.Key]++
	}
}

// A publisher that keeps a key's order when pipelined (broker.OrderKeeper)
// gets every message in one call, several keys interleaved: each key's
// messages are stored in call order. With an oversize message in the middle
// of a key's run, when the broker rejects it for good, the rest of the run
// is stored after what came before it, in order.
func testPipelinedKeyOrder(t *testing.T, h Harness) {
	in := newInstance(t, h)
	if !broker.KeepsKeyOrder(in.Publisher) {
		t.Skip("the publisher does not keep a key's order when pipelined (broker.OrderKeeper)")
	}
	const keys, perKey = 4, 150
	var msgs []courier.Message
	for i := range perKey {
		for k := range keys {
			msgs = append(msgs, message(in, fmt.Sprintf("key-%d", k), []byte(fmt.Sprint(i))))
		}
	}
	oversize := -1
	if h.Features.OversizeBytes > 0 && h.Features.OversizeRejected {
		oversize = len(msgs) / 2
		msgs[oversize].Payload = make([]byte, h.Features.OversizeBytes)
	}
	var want []courier.Message
	for i, err := range in.Publisher.Publish(context.Background(), msgs) {
		switch {
		case i == oversize && !errors.Is(err, broker.ErrRejected):
			t.Fatalf("oversize message %d: %v; want it rejected for good", i, err)
		case i != oversize && err != nil:
			t.Fatalf("message %d of key %s: %v", i, msgs[i].Key, err)
		case i != oversize:
			want = append(want, msgs[i])
		}
	}
	got := received(t, in, want)
	last := map[string]int{}
	for _, m := range firstCopies(got) {
		n, _ := strconv.Atoi(string(m.Payload))
		if p, ok := last[m.Key]; ok && n <= p {
			t.Fatalf("key %s: message %d came after message %d", m.Key, n, p)
		}
		last[m.Key] = n
	}
}
