package chaos

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
)

// unboundWait is how long the check waits, once everything else has
// settled, for the unbound subject's messages to become dead letters.
const unboundWait = 10 * time.Second

// settleStall is how long the settling may go without anything moving
// (no message leaving the outbox, none applied) before the check fails:
// longer than a redelivery after the consumers' ack wait and a poison
// message's backoff, the longest quiet times of a run that still settles.
const settleStall = 90 * time.Second

// result is what the check found.
type result struct {
	messages                          string // what was written
	settled                           time.Duration
	lost, twice, unknown, outOfOrder  int
	deadPoison, deadUnbound           int // expected dead letters found
	wantPoison, wantUnbound           int
	unexpectedDead, deadApplied, park int
}

func (r result) String() string {
	return fmt.Sprintf("%d lost, %d applied twice, %d unknown, %d out of key order; dead letters: %d/%d poison, %d/%d unbound subject, %d unexpected, %d applied anyway; %d parked",
		r.lost, r.twice, r.unknown, r.outOfOrder, r.deadPoison, r.wantPoison, r.deadUnbound, r.wantUnbound, r.unexpectedDead, r.deadApplied, r.park)
}

// check waits for the system to settle, then verifies the promise: every
// committed message applied exactly once, each key's messages applied in
// the order written, the poison and unbound-subject messages (and only
// they) dead letters with a reason, and the rest of a poisoned key applied
// in order after its dead letter. It logs what it checked, with counts, and
// fails with the evidence.
func check(t *testing.T, ctx context.Context, r *run, msgs []written) result {
	t.Helper()
	var res result
	deliver, byDead := 0, map[string]int{}
	for _, m := range msgs {
		if m.dead == "" {
			deliver++
		} else {
			byDead[m.dead]++
		}
	}
	res.wantPoison, res.wantUnbound = byDead[deadPoison], byDead[deadUnbound]
	res.messages = fmt.Sprintf("%d messages written (%d to apply; %d poison with %d behind them; %d on an unbound subject)",
		len(msgs), deliver, res.wantPoison, res.wantPoison*r.s.poisonBacklog, res.wantUnbound)
	if deliver == len(msgs) {
		res.messages = fmt.Sprintf("%d messages written, all to apply", len(msgs))
	}

	start := time.Now()
	var stuckSince time.Time
	// Settling fails once nothing has moved (the outbox's pending count,
	// the messages applied) for settleStall: the work stopped, rather than
	// ran slowly on a busy machine.
	type progress struct{ pending, applied int64 }
	var seen progress
	lastMoved := start
	for {
		st, err := r.db.producerAdmin.Stats(ctx)
		var applied, unbound int64
		if err == nil {
			err = r.db.consumer.QueryRowContext(ctx, `SELECT count(DISTINCT message_id) FROM effects`).Scan(&applied)
		}
		if err == nil {
			err = r.db.producer.QueryRowContext(ctx, `SELECT count(*) FROM courier_outbox WHERE topic = '`+unboundTopic+`'`).Scan(&unbound)
		}
		switch {
		case err != nil:
			t.Logf("settling: %v", err)
		case st.Pending == 0 && applied >= int64(deliver):
		case applied >= int64(deliver) && st.Pending == unbound:
			// Only the unbound subject's messages are left: they must
			// become dead letters soon, or never will.
			if stuckSince.IsZero() {
				stuckSince = time.Now()
			}
		default:
			stuckSince = time.Time{}
		}
		if err == nil && (st.Pending == 0 && applied >= int64(deliver) || !stuckSince.IsZero() && time.Since(stuckSince) > unboundWait) {
			break
		}
		if now := (progress{st.Pending, applied}); err == nil && now != seen {
			seen, lastMoved = now, time.Now()
		}
		if time.Since(lastMoved) > settleStall {
			t.Fatalf("not settled: nothing moved for %s, %s after the faults stopped: %d messages still in the outbox (%d of them on the unbound subject), %d of %d applied",
				settleStall, time.Since(start).Round(time.Second), st.Pending, unbound, applied, deliver)
		}
		time.Sleep(200 * time.Millisecond)
	}
	res.settled = time.Since(start)
	t.Logf("settled %s after the faults stopped", res.settled.Round(time.Millisecond))

	byID := make(map[string]written, len(msgs))
	for _, m := range msgs {
		byID[m.id] = m
	}
	rows, err := r.db.consumer.QueryContext(ctx, `SELECT message_id, k, seq FROM effects ORDER BY n`)
	testenv.Must(t, err, "read effects")
	defer rows.Close()
	count := map[string]int{}
	last := map[string]int{}
	disordered := map[string]bool{}
	for rows.Next() {
		var id, key string
		var seq int
		testenv.Must(t, rows.Scan(&id, &key, &seq), "scan effect")
		m, ok := byID[id]
		if !ok {
			res.unknown++
			t.Errorf("effect for message %s that was never committed", id)
			continue
		}
		count[id]++
		if count[id] == 2 {
			res.twice++
			t.Errorf("message %s (key %s, seq %d) applied twice", id, m.key, m.seq)
		}
		if seq <= last[key] && count[id] == 1 {
			res.outOfOrder++
			disordered[key] = true
			if res.outOfOrder <= 5 {
				t.Errorf("key %s: seq %d applied after seq %d", key, seq, last[key])
			}
		}
		last[key] = max(last[key], seq)
	}
	testenv.Must(t, rows.Err(), "effects")
	if len(disordered) > 0 {
		explainDisorder(t, ctx, r, disordered)
	}

	dls, err := r.db.producerAdmin.DeadLetters(ctx, 100000)
	testenv.Must(t, err, "dead letters")
	dead := make(map[string]store.DeadLetter, len(dls))
	for _, d := range dls {
		dead[d.MessageID] = d
		m, ok := byID[d.MessageID]
		switch {
		case d.LastError == "":
			t.Errorf("dead letter %d (message %s, key %s) without a reason", d.ID, d.MessageID, d.Key)
		case !ok || m.dead == "":
			res.unexpectedDead++
			if res.unexpectedDead <= 5 {
				t.Errorf("message %s (key %s, topic %s) is a dead letter after %d attempts, but every fault was survivable: %s",
					d.MessageID, d.Key, d.Topic, d.Attempts, d.LastError)
			}
		case m.dead == deadPoison:
			res.deadPoison++
		case m.dead == deadUnbound:
			res.deadUnbound++
		}
	}

	var unboundPending []written
	for _, m := range msgs {
		_, isDead := dead[m.id]
		switch {
		case m.dead == "" && count[m.id] == 0:
			res.lost++
			if res.lost <= 5 {
				t.Errorf("message %s (key %s, seq %d) never applied", m.id, m.key, m.seq)
			}
		case m.dead != "" && count[m.id] > 0:
			res.deadApplied++
			t.Errorf("message %s (key %s), expected to be a dead letter (%s), was applied", m.id, m.key, m.dead)
		case m.dead == deadPoison && !isDead:
			t.Errorf("poison message %s (key %s, seq %d), which the broker rejects on every attempt, is not a dead letter", m.id, m.key, m.seq)
		case m.dead == deadUnbound && !isDead:
			unboundPending = append(unboundPending, m)
		}
	}
	if n := len(unboundPending); n > 0 {
		// The relay must count a publish to a subject no stream binds as a
		// failed attempt, not as the broker being away.
		var lastErr string
		_ = r.db.producer.QueryRowContext(ctx, `SELECT last_error FROM courier_outbox WHERE topic = '`+unboundTopic+`' ORDER BY id LIMIT 1`).Scan(&lastErr)
		t.Errorf("UNBOUND SUBJECT: %d of %d messages on topic %q, whose subject no stream binds, are not dead letters %s after everything else settled "+
			"(still in the outbox, retried for ever; last error %q); they must become dead letters after %d attempts",
			n, res.wantUnbound, unboundTopic, unboundWait, lastErr, relayMaxAttempts)
	}

	parked, err := r.db.consumerAdmin.Parked(ctx, "", 100000)
	testenv.Must(t, err, "parked")
	res.park = len(parked)
	for i, p := range parked {
		if i < 5 {
			t.Errorf("parked by consumer %s: message %s (%s): %s", p.Consumer, p.MessageID, p.Reason, p.Error)
		}
	}
	t.Logf("checked %s over %d keys: %d applied, %s", res.messages, len(last), len(count), res)
	return res
}

// explainDisorder tells, for each key applied out of order, whether the
// broker's stream already holds its messages out of order (the relays
// published them so) or in order (the consumers reordered them). On a
// broker whose log the test does not read back, the order the consumer
// received them in stands for the broker's.
func explainDisorder(t *testing.T, ctx context.Context, r *run, keys map[string]bool) {
	t.Helper()
	if r.js == nil {
		order := r.delivered.byKey(keys)
		inBroker, shown := 0, 0
		for k := range keys {
			if !sorted(order[k]) {
				inBroker++
			}
			if shown++; shown <= 5 {
				t.Logf("key %s as delivered (seq@delivery number): %v", k, order[k])
			}
		}
		t.Errorf("%d of the %d keys applied out of order were delivered out of order already (the relays published them so, or the broker reordered them); the others were reordered by the inbox consumer", inBroker, len(keys))
		return
	}
	cons, err := r.js.OrderedConsumer(ctx, r.stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Logf("read the stream: %v", err)
		return
	}
	total, _ := r.streamMsgs(ctx)
	order := map[string][]string{}
	for read := uint64(0); read < total; {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Logf("read the stream: %v", err)
			return
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, _ := m.Metadata()
			if k := m.Headers().Get(couriernats.HeaderKey); keys[k] {
				at := ""
				if md != nil {
					at = fmt.Sprintf("@%d(+%.2fs)", md.Sequence.Stream, md.Timestamp.Sub(r.began).Seconds())
				}
				order[k] = append(order[k], string(m.Data())+at)
			}
		}
		if n == 0 {
			break
		}
		read += uint64(n)
	}
	inStream, shown := 0, 0
	for k := range keys {
		if !sorted(order[k]) {
			inStream++
		}
		if shown++; shown <= 5 {
			t.Logf("key %s in the stream (seq@stream sequence(time since the run began)): %v", k, order[k])
		}
	}
	t.Errorf("%d of the %d keys applied out of order are out of order in the stream already (the relays published them so); the others were reordered on the consuming side", inStream, len(keys))
}

// sorted reports whether the payload seqs of a key's stream entries
// ("seq@…") increase.
func sorted(entries []string) bool {
	last := 0
	for _, e := range entries {
		var seq int
		fmt.Sscan(strings.SplitN(e, "@", 2)[0], &seq)
		if seq <= last {
			return false
		}
		last = seq
	}
	return true
}
