package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/store/postgres"
)

// The consumers section's instances: each with its own broker connection
// and subscriber, its own inbox.Consumer (KeepOrder) and its own pool, all
// in the bench process; their handler inserts a row per message into
// effects, in the inbox's transaction (a batch handler: a group's rows in
// one statement).

// prepareEffects migrates Courier's tables into env's schema (the inbox's
// markers and the consumer store) and creates the effects table: a row per
// message applied, numbered in the order the rows were inserted (n), with
// the moment of the insert (clock_timestamp(), inside the transaction).
func prepareEffects(ctx context.Context, env *Env) error {
	if _, err := postgres.NewDriver(env.Pool).Migrate(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	_, err := env.Pool.Exec(ctx, `CREATE TABLE effects (
	n bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	message_id uuid NOT NULL,
	k text NOT NULL,
	seq int NOT NULL,
	instance int NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
)`)
	if err != nil {
		return fmt.Errorf("create table effects: %w", err)
	}
	return nil
}

// effectHandler is instance's handler: one row in effects.
func effectHandler(instance int) inbox.Handler[pgx.Tx] {
	return func(ctx context.Context, tx pgx.Tx, msg courier.Message) error {
		seq, err := seqOf(msg.Payload)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "INSERT INTO effects (message_id, k, seq, instance) VALUES ($1, $2, $3, $4)",
			[16]byte(msg.ID), msg.Key, seq, instance) // uuid.UUID would go as its string
		return err
	}
}

// numbered is the bench's payload (payloadFor) as the batch handler
// decodes it; its message type is the bench messages'.
type numbered struct {
	Seq int `json:"seq"`
}

// MessageType implements courier.Typed.
func (numbered) MessageType() string { return messageType }

// effectRouter is instance's router with one batch handler for the bench's
// messages (inbox.OnBatch): a group's rows in effects in one statement,
// in the order of msgs (each key's in its order), so that the rows' n
// follows it as effectHandler's one insert per message does.
func effectRouter(instance int) *inbox.Router[pgx.Tx] {
	r := inbox.NewRouter[pgx.Tx]()
	inbox.OnBatch(r, func(ctx context.Context, tx pgx.Tx, msgs []courier.Message, vs []numbered) error {
		ids := make([][16]byte, len(msgs)) // uuid.UUID would go as its string
		keys := make([]string, len(msgs))
		seqs := make([]int32, len(msgs))
		for i, msg := range msgs {
			ids[i], keys[i], seqs[i] = msg.ID, msg.Key, int32(vs[i].Seq)
		}
		_, err := tx.Exec(ctx, `INSERT INTO effects (message_id, k, seq, instance)
SELECT id, k, seq, $4 FROM unnest($1::uuid[], $2::text[], $3::int[]) WITH ORDINALITY AS m(id, k, seq, i) ORDER BY i`,
			ids, keys, seqs, instance)
		return err
	})
	return r
}

// consGroup is the instances of one measurement.
type consGroup struct {
	gate      chan struct{} // closed when the instances may receive
	gateOnce  sync.Once
	appName   string // the application_name of their pools
	instances []*consInstance
	// acked is when each message was first acknowledged, by number.
	acked *ackStamps
	// grouped counts the instances' groups committed.
	grouped *groupCounter
}

// groupCounter counts the groups of several deliveries the instances
// committed, and the deliveries in them (inbox.Observer.Grouped; a
// delivery applied alone is not told).
type groupCounter struct {
	inbox.NopObserver
	groups, messages atomic.Int64
}

// Grouped implements inbox.Observer.
func (gc *groupCounter) Grouped(_ string, n int) {
	gc.groups.Add(1)
	gc.messages.Add(int64(n))
}

// transactions returns how many transactions applied applied deliveries,
// by the groups counted: each group one, each delivery outside a group
// one.
func (gc *groupCounter) transactions(applied int64) int64 {
	return gc.groups.Load() + applied - gc.messages.Load()
}

// ackStamps holds when each message of a measurement was first
// acknowledged (its delivery's Ack called, once its transaction
// committed), by the number it carries: Unix nanoseconds, 0 until then.
type ackStamps struct {
	at []atomic.Int64
}

// stamp notes that message seq is acknowledged now, unless it was before
// or seq is out of range.
func (a *ackStamps) stamp(seq int, now time.Time) {
	if seq >= 0 && seq < len(a.at) {
		a.at[seq].CompareAndSwap(0, now.UnixNano())
	}
}

// of returns when message seq was first acknowledged; false if it was not.
func (a *ackStamps) of(seq int) (time.Time, bool) {
	ns := a.at[seq].Load()
	return time.Unix(0, ns), ns != 0
}

// consInstance is one instance of the consumer.
type consInstance struct {
	sub    broker.Subscriber
	c      *inbox.Consumer[pgx.Tx]
	pool   *pgxpool.Pool
	cancel context.CancelFunc
	done   chan struct{} // closed when its Run returned
}

// startConsumerGroup starts n instances whose subscribers hold their
// deliveries back until the group's gate opens (open).
func startConsumerGroup(ctx context.Context, env *Env, tgt *consTarget, s consSettings, n int) (*consGroup, error) {
	g := &consGroup{gate: make(chan struct{}), appName: "bench-consumer-" + env.token,
		acked: &ackStamps{at: make([]atomic.Int64, s.n+consLatencyTotal(s))}, grouped: &groupCounter{}}
	url, err := withParams(env.URL, "application_name", g.appName, "synchronous_commit", consSyncCommit)
	if err != nil {
		return nil, err
	}
	for i := range n {
		in, err := startInstance(ctx, url, tgt, s, i+1, g)
		if err != nil {
			g.stop()
			return nil, fmt.Errorf("start instance %d: %w", i+1, err)
		}
		g.instances = append(g.instances, in)
	}
	return g, nil
}

// startInstance starts instance number i: a pool on url (Concurrency+2
// connections, synchronous_commit as -consumers-sync-commit says), a
// subscriber gated and stamping its acknowledgements (g.gate, g.acked),
// an inbox consumer keeping order, of s.shape, whose groups g.grouped
// counts.
func startInstance(ctx context.Context, url string, tgt *consTarget, s consSettings, i int, g *consGroup) (*consInstance, error) {
	pool, err := newPool(ctx, url, int32(s.shape.concurrency+2))
	if err != nil {
		return nil, err
	}
	sub, err := tgt.spec.subscribe(ctx)
	if err != nil {
		pool.Close()
		return nil, err
	}
	db := postgres.NewDriver(pool)
	ib, err := inbox.New(db.Inbox(), consConsumer)
	var c *inbox.Consumer[pgx.Tx]
	if err == nil {
		gated := gatedSubscriber{sub, g.gate, g.acked}
		cfg := inbox.ConsumerConfig{KeepOrder: true, Concurrency: s.shape.concurrency, Logger: consLogger, Observer: g.grouped,
			Group: inbox.GroupConfig{MaxMessages: s.shape.group, MaxWait: consGroupWait}}
		if s.shape.batch {
			c, err = inbox.NewRouterConsumer(ib, gated, db.ConsumerStore(), effectRouter(i), cfg)
		} else {
			c, err = inbox.NewConsumer(ib, gated, db.ConsumerStore(), effectHandler(i), cfg)
		}
	}
	if err != nil {
		_ = sub.Close()
		pool.Close()
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	in := &consInstance{sub: sub, c: c, pool: pool, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(in.done)
		_ = c.Run(rctx)
	}()
	return in, nil
}

// open lets the instances receive.
func (g *consGroup) open() { g.gateOnce.Do(func() { close(g.gate) }) }

// stop stops every instance's consumer, then closes their subscribers
// together (each gives its partitions up and leaves) and their pools.
func (g *consGroup) stop() {
	for _, in := range g.instances {
		in.cancel()
	}
	var wg sync.WaitGroup
	for _, in := range g.instances {
		wg.Go(func() {
			<-in.done
			if err := in.sub.Close(); err != nil {
				logf("warning: close a subscriber: %v", err)
			}
			in.pool.Close()
		})
	}
	wg.Wait()
	g.instances = nil
}

// metrics sums the instances' consumer metrics.
func (g *consGroup) metrics() inbox.ConsumerMetrics {
	var m inbox.ConsumerMetrics
	for _, in := range g.instances {
		im := in.c.Metrics()
		m.Applied += im.Applied
		m.Duplicates += im.Duplicates
		m.Retried += im.Retried
		m.Parked += im.Parked
		m.Panicked += im.Panicked
	}
	return m
}

// partitions returns the partitions each instance consumes now.
func (g *consGroup) partitions() [][]int {
	out := make([][]int, len(g.instances))
	for i, in := range g.instances {
		out[i] = partitionsOf(in.sub)
	}
	return out
}

// shared reports whether the instances share all partitions out evenly:
// each held by one instance, and each instance holding partitions/n
// rounded down or up.
func shared(held [][]int, partitions int) bool {
	var all []int
	lo, hi := partitions/len(held), (partitions+len(held)-1)/len(held)
	for _, ps := range held {
		if len(ps) < lo || len(ps) > hi {
			return false
		}
		all = append(all, ps...)
	}
	slices.Sort(all)
	return len(slices.Compact(all)) == partitions && len(all) == partitions
}

// waitShared waits (at most a minute) until the instances share the
// partitions out evenly.
func (g *consGroup) waitShared(ctx context.Context, partitions int) error {
	err := waitFor(ctx, time.Minute, 20*time.Millisecond, func() (bool, error) { return shared(g.partitions(), partitions), nil })
	if err != nil {
		return fmt.Errorf("the %d instances did not share the %d partitions out (they hold %v): %w", len(g.instances), partitions, g.partitions(), err)
	}
	return nil
}

// waitApplied waits until the instances applied want messages, and
// returns when they did; it fails when none is applied for consStall.
func (g *consGroup) waitApplied(ctx context.Context, want int64) (time.Time, error) {
	last, since := int64(-1), time.Now()
	for {
		n := g.metrics().Applied
		if n >= want {
			return time.Now(), nil
		}
		if n != last {
			last, since = n, time.Now()
		}
		if time.Since(since) > consStall {
			return time.Time{}, fmt.Errorf("%d of %d messages applied, and none more for %s", n, want, consStall)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// gatedSubscriber holds Next back until its gate is closed, and stamps
// each delivery's first acknowledgement in acked; it passes the
// subscriber's broker.KeySharer on.
type gatedSubscriber struct {
	broker.Subscriber
	gate  <-chan struct{}
	acked *ackStamps
}

// Next implements broker.Subscriber.
func (g gatedSubscriber) Next(ctx context.Context) (broker.Delivery, error) {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	d, err := g.Subscriber.Next(ctx)
	if err != nil {
		return d, err
	}
	return stampedDelivery{d, g}, nil
}

// stampedDelivery stamps its message's number in its subscriber's acked
// when Ack is called and succeeds.
type stampedDelivery struct {
	broker.Delivery
	g gatedSubscriber
}

// Ack implements broker.Delivery.
func (d stampedDelivery) Ack(ctx context.Context) error {
	now := time.Now()
	if err := d.Delivery.Ack(ctx); err != nil {
		return err
	}
	if msg, err := d.g.Decode(d.Raw()); err == nil {
		if seq, err := seqOf(msg.Payload); err == nil {
			d.g.acked.stamp(seq, now)
		}
	}
	return nil
}

// SharesKeys implements broker.KeySharer.
func (g gatedSubscriber) SharesKeys() bool { return broker.SharesKeys(g.Subscriber) }

// Partitions implements broker.KeySharer.
func (g gatedSubscriber) Partitions() []int { return partitionsOf(g.Subscriber) }

// checkEffects fails unless the instances applied exactly want messages,
// each once, each key's in the order published (message i of key
// "key-<i mod keys>", so a key's numbers, in the order their rows were
// inserted, go up by keys from the key's own number), and none was parked
// or failed.
func checkEffects(ctx context.Context, env *Env, g *consGroup, s consSettings, want int) error {
	var rows, ids, seqs, first, last int
	err := env.Pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT message_id), count(DISTINCT seq), coalesce(min(seq), -1), coalesce(max(seq), -1) FROM effects").
		Scan(&rows, &ids, &seqs, &first, &last)
	if err != nil {
		return fmt.Errorf("count the effects: %w", err)
	}
	next := map[string]int{} // key -> the number its next row must carry
	outOfOrder, example := 0, ""
	r, err := env.Pool.Query(ctx, "SELECT k, seq FROM effects ORDER BY n")
	if err != nil {
		return fmt.Errorf("read the effects: %w", err)
	}
	var k string
	var seq int
	_, err = pgx.ForEachRow(r, []any{&k, &seq}, func() error {
		due, ok := next[k]
		if !ok {
			due, _ = strconv.Atoi(strings.TrimPrefix(k, "key-"))
		}
		if seq != due {
			if outOfOrder++; example == "" {
				example = fmt.Sprintf("key %s: message %d applied where %d was due", k, seq, due)
			}
		}
		next[k] = seq + s.keys
		return nil
	})
	if err != nil {
		return fmt.Errorf("read the effects: %w", err)
	}
	m := g.metrics()
	var problems []string
	if rows != want || ids != want || seqs != want || first != 0 || last != want-1 {
		problems = append(problems, fmt.Sprintf("%d lost, %d applied twice (%d rows for %d published: %d distinct message ids, %d distinct numbers from %d to %d, want 0 to %d)",
			want-seqs, rows-seqs, rows, want, ids, seqs, first, last, want-1))
	}
	if outOfOrder > 0 {
		problems = append(problems, fmt.Sprintf("%d messages applied out of their key's order (first: %s)", outOfOrder, example))
	}
	if m.Parked > 0 || m.Retried > 0 || m.Panicked > 0 {
		problems = append(problems, fmt.Sprintf("%d parked, %d retried, %d panicked", m.Parked, m.Retried, m.Panicked))
	}
	if len(problems) > 0 {
		return errors.New("the promise broke: " + strings.Join(problems, "; "))
	}
	if m.Duplicates > 0 {
		logf("  %d duplicate deliveries skipped by the inbox", m.Duplicates)
	}
	return nil
}
