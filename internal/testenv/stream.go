package testenv

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
)

// StreamMessages reads the whole JetStream stream on nc in order, decoding
// each message with mapping. It fails t when the stream cannot be read
// within a minute.
func StreamMessages(t testing.TB, nc *natsgo.Conn, stream string, mapping couriernats.Config) []courier.Message {
	t.Helper()
	var out []courier.Message
	eachStreamMessage(t, nc, stream, func(m jetstream.Msg) {
		msg, err := mapping.FromNATS(&natsgo.Msg{Subject: m.Subject(), Header: natsgo.Header(m.Headers()), Data: m.Data()})
		Must(t, err, "decode")
		out = append(out, msg)
	})
	return out
}

// StreamStamps reads the whole JetStream stream on nc and returns when
// JetStream stored each message, by message id (Nats-Msg-Id): the earliest
// a consumer could see it.
func StreamStamps(t testing.TB, nc *natsgo.Conn, stream string) map[[16]byte]time.Time {
	t.Helper()
	out := map[[16]byte]time.Time{}
	eachStreamMessage(t, nc, stream, func(m jetstream.Msg) {
		meta, err := m.Metadata()
		Must(t, err, "metadata")
		id, err := uuid.Parse(m.Headers().Get(natsgo.MsgIdHdr))
		Must(t, err, "message id")
		if _, seen := out[id]; !seen {
			out[id] = meta.Timestamp
		}
	})
	return out
}

// eachStreamMessage calls fn with each message of the JetStream stream on
// nc, in order. It fails t when the stream cannot be read within a minute.
func eachStreamMessage(t testing.TB, nc *natsgo.Conn, stream string, fn func(jetstream.Msg)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	Must(t, err, "jetstream")
	s, err := js.Stream(ctx, stream)
	Must(t, err, "stream")
	info, err := s.Info(ctx)
	Must(t, err, "stream info")
	total := int(info.State.Msgs)
	if total == 0 {
		return
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	Must(t, err, "ordered consumer")
	for read := 0; read < total; {
		batch, err := c.FetchNoWait(min(1000, total-read))
		Must(t, err, "fetch")
		got := 0
		for m := range batch.Messages() {
			got++
			fn(m)
		}
		read += got
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			t.Fatalf("fetch: %v", err)
		}
		if got == 0 {
			if ctx.Err() != nil {
				t.Fatalf("read %d of %d stream messages", read, total)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// CheckDelivery verifies that every written message is in got (a stream
// read in order) and that each key's messages first appear in write order.
// It returns the number of duplicates.
func CheckDelivery(t testing.TB, written, got []courier.Message) (dups int) {
	t.Helper()
	firstSeen := make(map[[16]byte]int, len(got))
	for i, m := range got {
		if _, ok := firstSeen[m.ID]; ok {
			dups++
			continue
		}
		firstSeen[m.ID] = i
	}
	lastPos := map[string]int{}
	lost := 0
	for _, m := range written {
		pos, ok := firstSeen[m.ID]
		if !ok {
			lost++
			if lost <= 5 {
				t.Errorf("message %s (key %s) never reached the broker", m.ID, m.Key)
			}
			continue
		}
		if prev, ok := lastPos[m.Key]; ok && pos < prev {
			t.Errorf("key %s out of order: message %s at stream position %d after position %d", m.Key, m.ID, pos, prev)
		}
		lastPos[m.Key] = pos
	}
	if lost > 0 {
		t.Fatalf("%d of %d messages lost", lost, len(written))
	}
	return dups
}

// StreamCount returns how many messages the JetStream stream holds.
func StreamCount(t testing.TB, nc *natsgo.Conn, stream string) int {
	t.Helper()
	n, ok := StreamCountIfAny(t, nc, stream)
	if !ok {
		t.Fatalf("stream %s: %v", stream, jetstream.ErrStreamNotFound)
	}
	return n
}

// StreamCountIfAny is StreamCount for a stream that may not exist yet:
// ok is false when it does not.
func StreamCountIfAny(t testing.TB, nc *natsgo.Conn, stream string) (n int, ok bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	Must(t, err, "jetstream")
	s, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, false
	}
	Must(t, err, "stream")
	info, err := s.Info(ctx)
	Must(t, err, "stream info")
	return int(info.State.Msgs), true
}

// DeleteStream deletes a stream the test made, if it exists.
func DeleteStream(t testing.TB, nc *natsgo.Conn, stream string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	Must(t, err, "jetstream")
	if err := js.DeleteStream(ctx, stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Logf("delete stream %s: %v", stream, err)
	}
}
