package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/courier-go/courier/internal/testenv"
)

// check waits for the system to settle, then verifies the promise: every
// committed message applied exactly once, each key's messages applied in
// the order written, and no dead letter without a reason. It logs what it
// checked, with counts, and fails with the evidence.
func check(t *testing.T, ctx context.Context, producer, consumer *testenv.PG, msgs []written, s settings) {
	t.Helper()
	start := time.Now()
	var pending, applied int64
	for {
		_ = producer.Pool.QueryRow(ctx, `SELECT count(*) FROM courier_outbox`).Scan(&pending)
		_ = consumer.Pool.QueryRow(ctx, `SELECT count(DISTINCT message_id) FROM effects`).Scan(&applied)
		if pending == 0 && applied >= int64(len(msgs)) {
			break
		}
		if time.Since(start) > 3*time.Minute {
			t.Fatalf("not settled 3 minutes after the faults stopped: %d messages still in the outbox, %d of %d applied",
				pending, applied, len(msgs))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("settled %s after the faults stopped", time.Since(start).Round(time.Millisecond))

	byID := make(map[string]written, len(msgs))
	for _, m := range msgs {
		byID[m.id] = m
	}
	rows, err := consumer.Pool.Query(ctx, `SELECT message_id::text, key, seq FROM effects ORDER BY n`)
	testenv.Must(t, err, "read effects")
	defer rows.Close()
	count := map[string]int{}
	last := map[string]int{}
	var total, unknown, twice, outOfOrder int
	for rows.Next() {
		var id, key string
		var seq int
		testenv.Must(t, rows.Scan(&id, &key, &seq), "scan effect")
		total++
		m, ok := byID[id]
		if !ok {
			unknown++
			t.Errorf("effect for message %s that was never committed", id)
			continue
		}
		count[id]++
		if count[id] == 2 {
			twice++
			t.Errorf("message %s (key %s, seq %d) applied twice", id, m.key, m.seq)
		}
		if seq <= last[key] && count[id] == 1 {
			outOfOrder++
			if outOfOrder <= 5 {
				t.Errorf("key %s: seq %d applied after seq %d", key, seq, last[key])
			}
		}
		last[key] = max(last[key], seq)
	}
	testenv.Must(t, rows.Err(), "effects")
	lost := 0
	for _, m := range msgs {
		if count[m.id] == 0 {
			lost++
			if lost <= 5 {
				t.Errorf("message %s (key %s, seq %d) never applied", m.id, m.key, m.seq)
			}
		}
	}
	var deadRelay, deadRelayNoReason, parked, parkedNoReason int
	testenv.Must(t, producer.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE last_error = '') FROM courier_outbox_dead_letters`).
		Scan(&deadRelay, &deadRelayNoReason), "dead letters")
	testenv.Must(t, consumer.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE last_error = '' OR reason = '') FROM courier_inbox_dead_letters`).
		Scan(&parked, &parkedNoReason), "parked")
	if deadRelayNoReason+parkedNoReason > 0 {
		t.Errorf("%d dead letters and %d parked messages without a reason", deadRelayNoReason, parkedNoReason)
	}
	if deadRelay+parked > 0 {
		t.Errorf("%d relay dead letters and %d parked messages: the faults were all survivable", deadRelay, parked)
	}
	var outboxSize, inboxSize, effectsSize int64
	_ = producer.Pool.QueryRow(ctx, `SELECT pg_total_relation_size('courier_outbox')`).Scan(&outboxSize)
	_ = consumer.Pool.QueryRow(ctx, `SELECT pg_total_relation_size('courier_inbox'), pg_total_relation_size('effects')`).Scan(&inboxSize, &effectsSize)
	t.Logf("checked %d committed messages over %d keys: %d applied, %d lost, %d applied twice, %d effects of unknown messages, "+
		"%d applied out of key order; %d relay dead letters, %d parked; tables: outbox %d KiB (empty), inbox %d KiB, effects %d KiB",
		len(msgs), len(last), len(count), lost, twice, unknown, outOfOrder, deadRelay, parked, outboxSize/1024, inboxSize/1024, effectsSize/1024)
	if lost+twice+unknown+outOfOrder > 0 {
		t.FailNow()
	}
}
