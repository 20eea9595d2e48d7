package failover

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/internal/testenv"
)

// Inbox consumers follow a promoted standby too: their transactions
// (the inbox's marker and the handler's effect, committed together) reach
// the new primary through the multi-host URL, by themselves. A message
// whose transaction committed on the old primary, and which the consumer
// then acknowledged to the broker, loses its effect when the standby never
// received that commit: the broker does not deliver it again. With
// synchronous replication no effect is lost; in every mode none is applied
// twice and none is parked, and every message published after the
// promotion is applied.
func TestInboxConsumerFollowsFailover(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) { repeat(t, func(t *testing.T) outcome { return runInboxFailover(t, m) }) })
	}
}

func runInboxFailover(t *testing.T, m mode) outcome {
	primary, standby, pool, d := startCluster(t, m, false)
	ctx := context.Background()
	_, err := pool.Exec(ctx, "CREATE TABLE failover_effects (n bigint PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT clock_timestamp())")
	testenv.Must(t, err, "effects table")

	srv := testenv.EmbeddedNATS(t)
	nc := testenv.Connect(t, srv.ClientURL())
	mapping := couriernats.Config{SubjectPrefix: "failover."}
	testenv.Must(t, couriernats.EnsureStream(ctx, nc, mapping, couriernats.StreamConfig{Name: "FAILOVER"}), "stream")
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping})
	testenv.Must(t, err, "publisher")

	// The consumer: each message's effect is a row of its number, in the
	// inbox's transaction.
	log := slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: slog.LevelError}))
	ib, err := inbox.New(d.Inbox(), "failover")
	testenv.Must(t, err, "inbox")
	sub, err := couriernats.NewSubscriber(ctx, nc, couriernats.SubscriberConfig{
		Config: mapping, Stream: "FAILOVER", Consumer: "failover", Topics: []string{"orders"}, AckWait: 2 * time.Second,
	})
	testenv.Must(t, err, "subscriber")
	t.Cleanup(func() { _ = sub.Close() })
	handler := func(ctx context.Context, tx pgx.Tx, msg courier.Message) error {
		_, err := tx.Exec(ctx, "INSERT INTO failover_effects (n) VALUES ($1)", string(msg.Payload))
		return err
	}
	c, err := inbox.NewConsumer(ib, sub, d.ConsumerStore(), handler, inbox.ConsumerConfig{
		Backoff: courier.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}, Logger: log,
	})
	testenv.Must(t, err, "consumer")
	cctx, stopConsumer := context.WithCancel(ctx)
	consumerDone := make(chan error, 1)
	go func() { consumerDone <- c.Run(cctx) }()
	t.Cleanup(func() { stopConsumer(); <-consumerDone })

	// The producer publishes numbered messages over ten keys, one at a
	// time, and notes when each was acknowledged.
	p := &producer{publish: func(ctx context.Context, n int64) error {
		return pub.Publish(ctx, []courier.Message{courier.NewMessage("orders", "k"+strconv.FormatInt(n%10, 10), "OrderPlaced", []byte(strconv.FormatInt(n, 10)))})[0]
	}}
	pctx, stopProducing := context.WithCancel(ctx)
	producing := make(chan struct{})
	go func() { defer close(producing); p.run(pctx) }()
	t.Cleanup(func() { stopProducing(); <-producing })

	effects := func() map[int64]time.Time {
		rows, err := pool.Query(ctx, "SELECT n, applied_at FROM failover_effects")
		if err != nil {
			return nil
		}
		got := map[int64]time.Time{}
		var n int64
		var at time.Time
		_, err = pgx.ForEachRow(rows, []any{&n, &at}, func() error { got[n] = at; return nil })
		if err != nil {
			return nil
		}
		return got
	}
	testenv.Eventually(t, 30*time.Second, func() bool { return len(effects()) >= 300 }, "the consumer applied %v messages before the failover",
		testenv.Lazy(func() any { return len(effects()) }))
	killed := time.Now()
	primary.Crash()
	standby.Promote()
	promoted := time.Now()
	before := p.count()
	testenv.Eventually(t, 60*time.Second, func() bool { return p.count() >= before+300 }, "published %v after the promotion",
		testenv.Lazy(func() any { return p.count() - before }))
	stopProducing()
	<-producing

	// Every message published after the promotion is applied: wait for
	// them, then count what the failover lost before it.
	published := p.published()
	after := published[before:]
	var got map[int64]time.Time
	testenv.Eventually(t, 60*time.Second, func() bool {
		got = effects()
		for _, n := range after {
			if _, ok := got[n]; !ok {
				return false
			}
		}
		return true
	}, "messages published after the promotion not applied: %v", testenv.Lazy(func() any {
		var missing []int64
		for _, n := range after {
			if _, ok := got[n]; !ok {
				missing = append(missing, n)
			}
		}
		return missing
	}))
	var o outcome
	o.acked, o.survived = len(published), len(got)
	var firstApplied time.Time
	for _, n := range published {
		at, ok := got[n]
		switch {
		case !ok:
			o.lost++
		case at.After(promoted) && (firstApplied.IsZero() || at.Before(firstApplied)):
			firstApplied = at
		}
	}
	mt := c.Metrics()
	parked, err := d.Admin().Parked(ctx, "failover", 100)
	testenv.Must(t, err, "parked deliveries")
	o.promotion, o.firstPublish = promoted.Sub(killed), firstApplied.Sub(promoted)
	t.Logf("inbox, %s: %d published, %d effects on the new primary: %d lost; %d applied, %d duplicates skipped, %d retried, %d parked; the standby promoted %v after the kill; the first effect on it %v after the promotion",
		m.name, len(published), len(got), o.lost, mt.Applied, mt.Duplicates, mt.Retried, len(parked),
		o.promotion.Round(time.Millisecond), o.firstPublish.Round(time.Millisecond))
	if len(parked) != 0 {
		t.Fatalf("%d deliveries parked across the failover: %+v", len(parked), parked[0])
	}
	if m.sync && o.lost != 0 {
		t.Fatalf("synchronous replication: %d effects lost; want none", o.lost)
	}
	return o
}

// producer publishes numbered messages one at a time until stopped; a
// publish that fails is not counted (nor sent again), the next number goes
// on.
type producer struct {
	publish func(ctx context.Context, n int64) error

	mu   sync.Mutex
	acks []int64
	n    atomic.Int64
}

func (p *producer) run(ctx context.Context) {
	for ctx.Err() == nil {
		n := p.n.Add(1)
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := p.publish(tctx, n)
		cancel()
		if err != nil {
			continue
		}
		p.mu.Lock()
		p.acks = append(p.acks, n)
		p.mu.Unlock()
	}
}

func (p *producer) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.acks)
}

func (p *producer) published() []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.acks)
}
