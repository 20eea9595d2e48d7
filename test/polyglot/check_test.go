package polyglot

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"maps"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
)

// expected is what a plan's run must deliver.
type expected struct {
	// messages are the committed messages, in write order.
	messages []courier.Message
	// scheduled holds the due times of the committed messages that were
	// scheduled: they arrive once due, occurring at their due time.
	scheduled map[uuid.UUID]due
	// rolledBack holds the ids of the messages of rolled-back
	// transactions.
	rolledBack map[uuid.UUID]bool
}

// committed checks lines, a writer's output for p, against p (each message
// as the plan gave it, the client's defaults where it gave none) and
// returns what must arrive.
func committed(t *testing.T, p plan, lines []written) expected {
	t.Helper()
	want := expected{scheduled: map[uuid.UUID]due{}, rolledBack: map[uuid.UUID]bool{}}
	i := 0
	for n, tx := range p.Transactions {
		for _, pm := range tx.Messages {
			l := lines[i]
			i++
			if l.Tx != n || l.Committed != tx.Commit {
				t.Fatalf("output line %d says transaction %d, committed %v; the plan's message %d is in transaction %d, commit %v", i, l.Tx, l.Committed, i, n, tx.Commit)
			}
			m := l.Message.message(t)
			checkBuilt(t, pm, m)
			switch {
			case !tx.Commit:
				want.rolledBack[m.ID] = true
			case tx.Due != nil:
				want.scheduled[m.ID] = dueOf(t, tx.Due)
				want.messages = append(want.messages, m)
			default:
				want.messages = append(want.messages, m)
			}
		}
	}
	return want
}

// checkBuilt checks that m, as a client built it, is pm with the defaults
// the contract gives.
func checkBuilt(t *testing.T, pm planMessage, m courier.Message) {
	t.Helper()
	if pm.ID != "" && m.ID.String() != pm.ID {
		t.Errorf("message %s: id %s, the plan gave %s", pm.Type, m.ID, pm.ID)
	}
	if pm.ID == "" && m.ID.Version() != 7 {
		t.Errorf("message %s: default id %s is a UUID of version %d, want a UUIDv7", pm.Type, m.ID, m.ID.Version())
	}
	if m.Topic != pm.Topic || m.Key != pm.Key || m.Type != pm.Type {
		t.Errorf("message %s: topic, key, type %q, %q, %q; the plan gave %q, %q, %q", pm.Type, m.Topic, m.Key, m.Type, pm.Topic, pm.Key, pm.Type)
	}
	version := max(pm.Version, 1)
	if m.Version != version {
		t.Errorf("message %s: version %d, want %d", pm.Type, m.Version, version)
	}
	var payload []byte
	contentType := courier.ContentTypeBinary
	switch {
	case pm.PayloadBase64 != nil:
		payload, _ = base64.StdEncoding.DecodeString(*pm.PayloadBase64)
	case pm.PayloadText != nil:
		payload = []byte(*pm.PayloadText)
	default:
		contentType = courier.ContentTypeJSON
		var got, want any
		if err := json.Unmarshal(m.Payload, &got); err != nil {
			t.Errorf("message %s: JSON payload %q does not decode: %v", pm.Type, m.Payload, err)
		}
		b, _ := json.Marshal(pm.PayloadJSON)
		_ = json.Unmarshal(b, &want)
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(want)
		if !bytes.Equal(gb, wb) {
			t.Errorf("message %s: JSON payload %s, the plan gave %s", pm.Type, m.Payload, b)
		}
		payload = m.Payload
	}
	if !bytes.Equal(m.Payload, payload) {
		t.Errorf("message %s: payload %q, the plan gave %q", pm.Type, m.Payload, payload)
	}
	if pm.ContentType != "" {
		contentType = pm.ContentType
	}
	if m.ContentType != contentType {
		t.Errorf("message %s: content type %q, want %q", pm.Type, m.ContentType, contentType)
	}
	if !maps.Equal(m.Headers, pm.Headers) {
		t.Errorf("message %s: headers %v, the plan gave %v", pm.Type, m.Headers, pm.Headers)
	}
	if pm.OccurredAt != "" {
		at, _ := time.Parse(time.RFC3339Nano, pm.OccurredAt)
		if !m.OccurredAt.Equal(at) {
			t.Errorf("message %s: occurred at %s, the plan gave %s", pm.Type, m.OccurredAt, at)
		}
	} else if age := time.Since(m.OccurredAt); age < 0 || age > 10*time.Minute {
		t.Errorf("message %s: default occurred_at %s is not the time of writing (%s ago)", pm.Type, m.OccurredAt, age)
	}
}

// checkOrders checks that each committed transaction's business row is
// there and each rolled-back one's is not.
func checkOrders(t *testing.T, p plan, orders map[string]string) {
	t.Helper()
	for _, tx := range p.Transactions {
		note, ok := orders[tx.Order.ID]
		switch {
		case tx.Commit && (!ok || note != tx.Order.Note):
			t.Errorf("committed order %s: polyglot_orders holds %q (present %v), want %q", tx.Order.ID, note, ok, tx.Order.Note)
		case !tx.Commit && ok:
			t.Errorf("rolled-back order %s is in polyglot_orders", tx.Order.ID)
		}
	}
}

// checkStream checks the stream, read in order: every committed message
// is there as written (a scheduled one occurring at its due time, after it
// was written), each key's written messages in write order, and no
// message of a rolled-back transaction.
func checkStream(t *testing.T, want expected, got []courier.Message) {
	t.Helper()
	byID := map[uuid.UUID]courier.Message{}
	var inOrder []courier.Message
	for _, m := range want.messages {
		byID[m.ID] = m
		if _, ok := want.scheduled[m.ID]; !ok {
			inOrder = append(inOrder, m)
		}
	}
	for _, g := range got {
		if want.rolledBack[g.ID] {
			t.Errorf("message %s of a rolled-back transaction was published", g.ID)
			continue
		}
		w, ok := byID[g.ID]
		if !ok {
			t.Errorf("message %s (key %s) was published but never written", g.ID, g.Key)
			continue
		}
		if g.Topic != w.Topic || g.Key != w.Key || g.Type != w.Type || g.Version != w.Version || g.ContentType != w.ContentType {
			t.Errorf("message %s published as topic %q key %q type %q version %d content type %q; written as %q %q %q %d %q",
				g.ID, g.Topic, g.Key, g.Type, g.Version, g.ContentType, w.Topic, w.Key, w.Type, w.Version, w.ContentType)
		}
		if !bytes.Equal(g.Payload, w.Payload) {
			t.Errorf("message %s published with payload %q, written %q", g.ID, g.Payload, w.Payload)
		}
		if !maps.Equal(g.Headers, w.Headers) && (len(g.Headers) > 0 || len(w.Headers) > 0) {
			t.Errorf("message %s published with headers %v, written %v", g.ID, g.Headers, w.Headers)
		}
		d, scheduled := want.scheduled[g.ID]
		switch {
		case scheduled && !d.at.IsZero() && !g.OccurredAt.Equal(d.at):
			t.Errorf("message %s scheduled at %s published as occurring at %s", g.ID, d.at, g.OccurredAt)
		case scheduled && d.at.IsZero() && g.OccurredAt.Before(w.OccurredAt.Add(d.after-time.Second)):
			t.Errorf("message %s scheduled %s after its writing (%s) published as occurring at %s", g.ID, d.after, w.OccurredAt, g.OccurredAt)
		case !scheduled && !g.OccurredAt.Equal(w.OccurredAt):
			t.Errorf("message %s published as occurring at %s, written %s", g.ID, g.OccurredAt, w.OccurredAt)
		}
	}
	if dups := testenv.CheckDelivery(t, want.messages, got); dups > 0 {
		t.Logf("%d messages published twice (at-least-once)", dups)
	}
	testenv.CheckDelivery(t, inOrder, got)
}

// checkApplied checks that the consumer applied each committed message
// once, each key's written messages in write order, and nothing of a
// rolled-back transaction.
func checkApplied(t *testing.T, want expected, got []appliedMessage) {
	t.Helper()
	pos := map[string]int{}
	for i, a := range got {
		if _, dup := pos[a.id]; dup {
			t.Errorf("message %s applied twice", a.id)
		}
		pos[a.id] = i
	}
	last := map[string]int{}
	for _, m := range want.messages {
		i, ok := pos[m.ID.String()]
		if !ok {
			t.Errorf("committed message %s (key %s) was never applied", m.ID, m.Key)
			continue
		}
		delete(pos, m.ID.String())
		if _, ok := want.scheduled[m.ID]; ok {
			continue
		}
		if prev, ok := last[m.Key]; ok && i < prev {
			t.Errorf("key %s applied out of order: message %s applied at %d, after position %d", m.Key, m.ID, i, prev)
		}
		last[m.Key] = i
	}
	for id := range pos {
		t.Errorf("message %s was applied but never committed", id)
	}
}

// due is a plan's due time: at a moment, or after a while.
type due struct {
	at    time.Time
	after time.Duration
}

// dueOf decodes a plan's due.
func dueOf(t *testing.T, d map[string]any) due {
	t.Helper()
	if ms, ok := d["after_ms"].(int); ok {
		return due{after: time.Duration(ms) * time.Millisecond}
	}
	s, _ := d["at"].(string)
	at, err := time.Parse(time.RFC3339Nano, s)
	testenv.Must(t, err, "plan's due")
	return due{at: at}
}
