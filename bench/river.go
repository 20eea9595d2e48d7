package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// River settings: those of River's own throughput benchmark (riverbench in
// River's CLI), which its authors found far faster than the defaults
// (FetchCooldown 100ms, FetchPollInterval 1s).
const (
	riverFetchCooldown     = 2 * time.Millisecond
	riverFetchPollInterval = 20 * time.Millisecond
	riverMaxWorkers        = 2000
)

// PublishArgs is the River job "publish this message to NATS": one job per
// message, inserted with InsertTx in the business transaction.
type PublishArgs struct {
	// ID becomes the JetStream message's Nats-Msg-Id.
	ID string `json:"id"`
	// Subject is the NATS subject.
	Subject string `json:"subject"`
	// Key is the message's key (payload/metadata only: River has no per-key
	// ordering).
	Key string `json:"key"`
	// OccurredAt is when the message was created.
	OccurredAt time.Time `json:"occurred_at"`
	// Payload is the message body.
	Payload []byte `json:"payload"`
}

// Kind implements river.JobArgs.
func (PublishArgs) Kind() string { return "bench_publish" }

// NoopArgs is a job shaped like PublishArgs whose worker does nothing: it
// measures River's database side without a broker.
type NoopArgs struct{ PublishArgs }

// Kind implements river.JobArgs.
func (NoopArgs) Kind() string { return "bench_noop" }

// publishWorker publishes a job's message to JetStream and waits for the
// ack; an error makes River retry the job.
type publishWorker struct {
	river.WorkerDefaults[PublishArgs]
	js        jetstream.JetStream
	published *atomic.Int64
}

// Work implements river.Worker.
func (w *publishWorker) Work(ctx context.Context, job *river.Job[PublishArgs]) error {
	a := job.Args
	if _, err := w.js.PublishMsg(ctx, benchNATSMsg(a.Subject, a.ID, a.Key, a.OccurredAt, a.Payload)); err != nil {
		return err
	}
	w.published.Add(1)
	return nil
}

// noopWorker completes jobs without doing anything.
type noopWorker struct {
	river.WorkerDefaults[NoopArgs]
	worked *atomic.Int64
}

// Work implements river.Worker.
func (w *noopWorker) Work(context.Context, *river.Job[NoopArgs]) error {
	w.worked.Add(1)
	return nil
}

// riverSystem is River used as the relay. With noop, jobs are NoopArgs and
// the worker does not publish (the database-only limit).
type riverSystem struct{ noop bool }

// Name implements System.
func (*riverSystem) Name() string { return "river" }

var discardLogger = slog.New(slog.DiscardHandler)

// Prepare implements System.
func (*riverSystem) Prepare(ctx context.Context, env *Env) error {
	m, err := rivermigrate.New(riverpgxv5.New(env.Pool), &rivermigrate.Config{Schema: env.Schema, Logger: discardLogger})
	if err != nil {
		return err
	}
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	return err
}

// workers registers the benchmark's workers; js and the counters may be nil
// for an insert-only client.
func riverWorkers(js jetstream.JetStream, published, worked *atomic.Int64) *river.Workers {
	ws := river.NewWorkers()
	river.AddWorker(ws, &publishWorker{js: js, published: published})
	river.AddWorker(ws, &noopWorker{worked: worked})
	return ws
}

// riverInsertClient returns a River client that only inserts. Its
// FetchCooldown also spaces its insert notifications (at most one per queue
// per cooldown), so it gets the working client's value.
func riverInsertClient(env *Env) (*river.Client[pgx.Tx], error) {
	return river.NewClient(riverpgxv5.New(env.Pool), &river.Config{
		Schema:        env.Schema,
		Logger:        discardLogger,
		FetchCooldown: riverFetchCooldown,
		Workers:       riverWorkers(nil, nil, nil),
	})
}

func (s *riverSystem) args(subject, key string, payload []byte) river.JobArgs {
	a := PublishArgs{ID: uuid.NewString(), Subject: subject, Key: key, OccurredAt: time.Now(), Payload: payload}
	if s.noop {
		return NoopArgs{a}
	}
	return a
}

// Fill implements System.
func (s *riverSystem) Fill(ctx context.Context, env *Env, n, keys int) error {
	c, err := riverInsertClient(env)
	if err != nil {
		return err
	}
	for done := 0; done < n; {
		k := min(1000, n-done)
		params := make([]river.InsertManyParams, k)
		for i := range params {
			params[i].Args = s.args(env.Subject(), keyFor(done+i, keys), payloadFor(done+i))
		}
		err := pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error {
			_, err := c.InsertManyTx(ctx, tx, params)
			return err
		})
		if err != nil {
			return fmt.Errorf("river fill: %w", err)
		}
		done += k
	}
	return nil
}

type riverWriter struct {
	s       *riverSystem
	c       *river.Client[pgx.Tx]
	subject string
}

// NewWriter implements System.
func (s *riverSystem) NewWriter(_ context.Context, env *Env) (Writer, error) {
	c, err := riverInsertClient(env)
	if err != nil {
		return nil, err
	}
	return riverWriter{s: s, c: c, subject: env.Subject()}, nil
}

// Write implements Writer.
func (w riverWriter) Write(ctx context.Context, tx pgx.Tx, key string, payload []byte) (string, error) {
	a := w.s.args(w.subject, key, payload)
	_, err := w.c.InsertTx(ctx, tx, a, nil)
	switch a := a.(type) {
	case PublishArgs:
		return a.ID, err
	case NoopArgs:
		return a.ID, err
	}
	return "", err
}

// riverRelay is a running River client working the publish jobs.
type riverRelay struct {
	c         *river.Client[pgx.Tx]
	pool      *pgxpool.Pool
	nc        *natsgo.Conn
	published atomic.Int64 // publish jobs whose message was acked
	worked    atomic.Int64 // no-op jobs worked
	completed atomic.Int64 // jobs River recorded as completed
	noop      bool
	unsub     func()
	once      sync.Once
	err       error
}

// StartRelay implements System.
func (s *riverSystem) StartRelay(ctx context.Context, env *Env) (Relay, error) {
	pool, err := newPool(ctx, env.RelayURL, 10)
	if err != nil {
		return nil, err
	}
	nc, err := natsgo.Connect(env.NATSURL)
	if err != nil {
		pool.Close()
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		pool.Close()
		return nil, err
	}
	rr := &riverRelay{pool: pool, nc: nc, noop: s.noop}
	rr.c, err = river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema:            env.Schema,
		Logger:            discardLogger,
		FetchCooldown:     riverFetchCooldown,
		FetchPollInterval: riverFetchPollInterval,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: riverMaxWorkers}},
		Workers:           riverWorkers(js, &rr.published, &rr.worked),
	})
	if err != nil {
		nc.Close()
		pool.Close()
		return nil, err
	}
	// Completion events come after River's completer has written the job's
	// completed state: they mark the end of River's bookkeeping.
	events, unsub := rr.c.SubscribeConfig(&river.SubscribeConfig{ChanSize: 100000, Kinds: []river.EventKind{river.EventKindJobCompleted}})
	rr.unsub = unsub
	go func() {
		for range events {
			rr.completed.Add(1)
		}
	}()
	if err := rr.c.Start(context.Background()); err != nil {
		unsub()
		nc.Close()
		pool.Close()
		return nil, err
	}
	return rr, nil
}

// Published implements Relay.
func (r *riverRelay) Published() int64 {
	if r.noop {
		return r.worked.Load()
	}
	return r.published.Load()
}

// Settle waits for River's completion events of n jobs.
func (r *riverRelay) Settle(ctx context.Context, n int64) error {
	return waitFor(ctx, time.Minute, time.Millisecond, func() (bool, error) { return r.completed.Load() >= n, nil })
}

// Stop implements Relay.
func (r *riverRelay) Stop() error {
	r.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := r.c.Stop(ctx); err != nil && !errors.Is(err, context.Canceled) {
			r.err = err
		}
		r.unsub()
		r.nc.Close()
		r.pool.Close()
	})
	return r.err
}
