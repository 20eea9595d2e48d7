package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/postgres"
)

// courierSystem is Courier: outbox.Writer in the business transaction, one
// relay (relay.New with default settings and the LISTEN/NOTIFY notifier)
// publishing to JetStream with Courier's asynchronous publisher.
type courierSystem struct{}

// Name implements System.
func (*courierSystem) Name() string { return "courier" }

// Prepare implements System.
func (*courierSystem) Prepare(ctx context.Context, env *Env) error {
	_, err := postgres.NewDriver(env.Pool).Migrate(ctx)
	return err
}

// courierMessage builds the benchmark message seq.
func courierMessage(key string, payload []byte) courier.Message {
	return courier.NewMessage(Topic, key, messageType, payload, courier.WithContentType(contentType))
}

// Fill implements System.
func (*courierSystem) Fill(ctx context.Context, env *Env, n, keys int) error {
	w := outbox.New(postgres.Pgx(), outbox.Config{})
	for done := 0; done < n; {
		k := min(1000, n-done)
		msgs := make([]courier.Message, k)
		for i := range msgs {
			msgs[i] = courierMessage(keyFor(done+i, keys), payloadFor(done+i))
		}
		err := pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error { return w.Write(ctx, tx, msgs...) })
		if err != nil {
			return fmt.Errorf("courier fill: %w", err)
		}
		done += k
	}
	return nil
}

type courierWriter struct{ w *outbox.Writer[pgx.Tx] }

// NewWriter implements System.
func (*courierSystem) NewWriter(context.Context, *Env) (Writer, error) {
	return courierWriter{w: outbox.New(postgres.Pgx(), outbox.Config{})}, nil
}

// Write implements Writer.
func (c courierWriter) Write(ctx context.Context, tx pgx.Tx, key string, payload []byte) (string, error) {
	m := courierMessage(key, payload)
	return m.ID.String(), c.w.Write(ctx, tx, m)
}

// courierRelay is a running relay.Relay with its resources.
type courierRelay struct {
	r       *relay.Relay
	release func() // closes the publisher's connection and the database
	cancel  context.CancelFunc
	done    chan error
	once    sync.Once
	err     error

	// calls counts the relay's calls to its publisher, and keeps asks the
	// publisher whether it keeps a key's order (the brokers section; nil
	// elsewhere).
	calls *callCounter
	keeps func() bool
}

// brokerCalls returns the relay's calls to its publisher so far and
// whether the publisher keeps a key's order; false when not counted.
func (c *courierRelay) brokerCalls() (calls int64, keeps, ok bool) {
	if c.calls == nil {
		return 0, false, false
	}
	return c.calls.n.Load(), c.keeps(), true
}

// StartRelay implements System.
func (*courierSystem) StartRelay(ctx context.Context, env *Env) (Relay, error) {
	st, cfg, closeDB, err := openCourierStore(ctx, env)
	if err != nil {
		return nil, err
	}
	return startCourierRelay(env, st, cfg, closeDB)
}

// openCourierStore opens the drains' Courier store on env's schema: its own
// pool on env.RelayURL (at most 10 connections), the relay store of
// postgres.NewDriver with default settings, and a relay.Config with the LISTEN/NOTIFY notifier and
// every other setting at its default. closeDB closes the pool.
func openCourierStore(ctx context.Context, env *Env) (st store.RelayStore, cfg relay.Config, closeDB func(), err error) {
	pool, err := newPool(ctx, env.RelayURL, 10)
	if err != nil {
		return nil, cfg, nil, err
	}
	st, err = postgres.NewDriver(pool).RelayStore(ctx, store.RelayConfig{})
	if err != nil {
		pool.Close()
		return nil, cfg, nil, err
	}
	n, err := postgres.NewNotifier(env.RelayURL, nil)
	if err != nil {
		pool.Close()
		return nil, cfg, nil, err
	}
	return st, relay.Config{Notifier: n}, pool.Close, nil
}

// startCourierRelay runs relay.New(st, …) with cfg (the drains: default
// settings and a notifier, nil for polling) publishing to env's stream with
// Courier's JetStream publisher. closeDB releases the store's database when
// the relay stops, or at once when it cannot start.
func startCourierRelay(env *Env, st store.RelayStore, cfg relay.Config, closeDB func()) (Relay, error) {
	nc, err := couriernats.Connect(env.NATSURL)
	if err != nil {
		closeDB()
		return nil, err
	}
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: couriernats.Config{SubjectPrefix: env.Prefix}})
	if err != nil {
		nc.Close()
		closeDB()
		return nil, err
	}
	return runCourierRelay(st, pub, cfg, func() {
		nc.Close()
		closeDB()
	})
}

// runCourierRelay runs relay.New(st, pub, cfg) until it is stopped.
// release closes the publisher's connection and the store's database when
// the relay stops, or at once when it cannot start.
func runCourierRelay(st store.RelayStore, pub broker.Publisher, cfg relay.Config, release func()) (Relay, error) {
	if cfg.Observer == nil {
		cfg.Observer = slowCallObserver("polling")
	}
	r, err := relay.New(st, pub, cfg)
	if err != nil {
		release()
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	cr := &courierRelay{r: r, release: release, cancel: cancel, done: make(chan error, 1)}
	go func() { cr.done <- r.Run(rctx) }()
	return cr, nil
}

// Published implements Relay.
func (c *courierRelay) Published() int64 { return c.r.Metrics().Published }

// Settle returns at once: Courier counts a message as published only after
// its batch was marked in the database.
func (c *courierRelay) Settle(context.Context, int64) error { return nil }

// Stop implements Relay.
func (c *courierRelay) Stop() error {
	c.once.Do(func() {
		c.cancel()
		err := <-c.done
		if err != nil && !errors.Is(err, context.Canceled) {
			c.err = err
		}
		c.release()
	})
	return c.err
}
