package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	natsgo "github.com/nats-io/nats.go"
)

// Watermill settings. The forwarder reads the SQL Pub/Sub with the default
// PostgreSQL schema and offsets adapter (the pair Watermill documents for
// PostgreSQL and for the forwarder) through pgx.
const (
	// forwarderTopic is the SQL topic the forwarder listens to (Watermill's
	// default name).
	forwarderTopic = "forwarder_topic"
	// watermillBatch is DefaultPostgreSQLSchema.SubscribeBatchSize:
	// documented as the performance knob (default 100); 1000 matches
	// Courier's batch size.
	watermillBatch = 1000
	// watermillPoll is SubscriberConfig.PollInterval, the wait after an
	// empty query (default 1s). Watermill has no wake-up mechanism, so this
	// bounds its latency; 10ms gives it a fair chance.
	watermillPoll = 10 * time.Millisecond
)

// watermillSystem is Watermill's forwarder (components/forwarder): the
// business transaction publishes an enveloped message through a
// watermill-sql Publisher on the transaction; a Forwarder subscribed to the
// SQL topic unwraps each message and publishes it with watermill-nats's
// JetStream publisher (synchronous, waits for the ack), one at a time.
//
// With noBroker the forwarder's publisher discards messages: the
// database-only limit.
type watermillSystem struct{ noBroker bool }

// Name implements System.
func (*watermillSystem) Name() string { return "watermill" }

func watermillSchema() wmsql.DefaultPostgreSQLSchema {
	return wmsql.DefaultPostgreSQLSchema{SubscribeBatchSize: watermillBatch}
}

// watermillSubscriber returns the SQL subscriber the forwarder reads with.
func watermillSubscriber(pool *pgxpool.Pool) (*wmsql.Subscriber, error) {
	return wmsql.NewSubscriber(wmsql.BeginnerFromPgx(pool), wmsql.SubscriberConfig{
		SchemaAdapter:    watermillSchema(),
		OffsetsAdapter:   wmsql.DefaultPostgreSQLOffsetsAdapter{},
		PollInterval:     watermillPoll,
		InitializeSchema: true,
	}, watermill.NopLogger{})
}

// Prepare implements System.
func (*watermillSystem) Prepare(ctx context.Context, env *Env) error {
	sub, err := watermillSubscriber(env.Pool)
	if err != nil {
		return err
	}
	defer sub.Close()
	return sub.SubscribeInitialize(forwarderTopic)
}

// watermillMessage builds a benchmark message; metadata carries what
// Courier keeps in columns and headers.
func watermillMessage(key string, payload []byte) *message.Message {
	m := message.NewMessage(watermill.NewUUID(), payload)
	m.Metadata.Set(headerKey, key)
	m.Metadata.Set(headerType, messageType)
	m.Metadata.Set(headerVersion, "1")
	m.Metadata.Set(headerOccurredAt, time.Now().UTC().Format(time.RFC3339Nano))
	m.Metadata.Set(headerCType, contentType)
	return m
}

// publishInTx publishes msgs to the forwarder's SQL topic inside tx, as
// Watermill documents: a SQL publisher per transaction, decorated by the
// forwarder's enveloping publisher.
func publishInTx(tx pgx.Tx, dest string, msgs ...*message.Message) error {
	sqlPub, err := wmsql.NewPublisher(wmsql.TxFromPgx(tx), wmsql.PublisherConfig{SchemaAdapter: watermillSchema()}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	return forwarder.NewPublisher(sqlPub, forwarder.PublisherConfig{ForwarderTopic: forwarderTopic}).Publish(dest, msgs...)
}

// Fill implements System.
func (*watermillSystem) Fill(ctx context.Context, env *Env, n, keys int) error {
	for done := 0; done < n; {
		k := min(1000, n-done)
		msgs := make([]*message.Message, k)
		for i := range msgs {
			msgs[i] = watermillMessage(keyFor(done+i, keys), payloadFor(done+i))
		}
		err := pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error { return publishInTx(tx, env.Subject(), msgs...) })
		if err != nil {
			return fmt.Errorf("watermill fill: %w", err)
		}
		done += k
	}
	return nil
}

type watermillWriter struct{ dest string }

// NewWriter implements System.
func (*watermillSystem) NewWriter(_ context.Context, env *Env) (Writer, error) {
	return watermillWriter{dest: env.Subject()}, nil
}

// Write implements Writer.
func (w watermillWriter) Write(_ context.Context, tx pgx.Tx, key string, payload []byte) (string, error) {
	m := watermillMessage(key, payload)
	return m.UUID, publishInTx(tx, w.dest, m)
}

// newWatermillNATSPublisher returns watermill-nats's publisher with
// JetStream on (its production-recommended publisher; the pkg/jetstream one
// is marked experimental) and TrackMsgId, which sets Nats-Msg-Id to the
// message's UUID for JetStream's deduplication, as Courier does.
func newWatermillNATSPublisher(nc *natsgo.Conn) (*wmnats.Publisher, error) {
	return wmnats.NewPublisherWithNatsConn(nc, wmnats.PublisherPublishConfig{
		Marshaler:         &wmnats.NATSMarshaler{},
		SubjectCalculator: wmnats.DefaultSubjectCalculator,
		JetStream:         wmnats.JetStreamConfig{TrackMsgId: true},
	}, watermill.NopLogger{})
}

// countingPublisher counts messages its wrapped publisher published.
type countingPublisher struct {
	message.Publisher
	n atomic.Int64
}

// Publish implements message.Publisher.
func (c *countingPublisher) Publish(topic string, msgs ...*message.Message) error {
	err := c.Publisher.Publish(topic, msgs...)
	if err == nil {
		c.n.Add(int64(len(msgs)))
	}
	return err
}

// discardPublisher is a message.Publisher that drops everything.
type discardPublisher struct{}

// Publish implements message.Publisher.
func (discardPublisher) Publish(string, ...*message.Message) error { return nil }

// Close implements message.Publisher.
func (discardPublisher) Close() error { return nil }

// watermillRelay is a running Forwarder.
type watermillRelay struct {
	fwd  *forwarder.Forwarder
	sub  *wmsql.Subscriber
	pub  *countingPublisher
	pool *pgxpool.Pool
	nc   *natsgo.Conn
	done chan error
	once sync.Once
	err  error
}

// StartRelay implements System.
func (s *watermillSystem) StartRelay(ctx context.Context, env *Env) (Relay, error) {
	pool, err := newPool(ctx, env.RelayURL, 10)
	if err != nil {
		return nil, err
	}
	sub, err := watermillSubscriber(pool)
	if err != nil {
		pool.Close()
		return nil, err
	}
	nc, err := natsgo.Connect(env.NATSURL)
	if err != nil {
		pool.Close()
		return nil, err
	}
	var np message.Publisher = discardPublisher{}
	if !s.noBroker {
		if np, err = newWatermillNATSPublisher(nc); err != nil {
			nc.Close()
			pool.Close()
			return nil, err
		}
	}
	pub := &countingPublisher{Publisher: np}
	fwd, err := forwarder.NewForwarder(sub, pub, watermill.NopLogger{}, forwarder.Config{ForwarderTopic: forwarderTopic})
	if err != nil {
		nc.Close()
		pool.Close()
		return nil, err
	}
	wr := &watermillRelay{fwd: fwd, sub: sub, pub: pub, pool: pool, nc: nc, done: make(chan error, 1)}
	go func() { wr.done <- fwd.Run(context.Background()) }()
	select {
	case <-fwd.Running():
	case err := <-wr.done:
		nc.Close()
		pool.Close()
		return nil, fmt.Errorf("forwarder stopped: %w", err)
	case <-time.After(30 * time.Second):
		_ = wr.Stop()
		return nil, errors.New("forwarder did not start within 30s")
	}
	return wr, nil
}

// Published implements Relay.
func (w *watermillRelay) Published() int64 { return w.pub.n.Load() }

// Settle waits until the consumer group's acked offset reaches the newest
// message: the subscriber records it at the end of each batch.
func (w *watermillRelay) Settle(ctx context.Context, _ int64) error {
	var lastOffset int64
	var lastTx string
	err := w.pool.QueryRow(ctx, `SELECT "offset", transaction_id::text FROM watermill_`+forwarderTopic+
		` ORDER BY transaction_id DESC, "offset" DESC LIMIT 1`).Scan(&lastOffset, &lastTx)
	if err != nil {
		return fmt.Errorf("watermill: newest message: %w", err)
	}
	return waitFor(ctx, time.Minute, 2*time.Millisecond, func() (bool, error) {
		var acked int64
		var tx string
		err := w.pool.QueryRow(ctx, `SELECT offset_acked, last_processed_transaction_id::text FROM watermill_offsets_`+
			forwarderTopic+` WHERE consumer_group = ''`).Scan(&acked, &tx)
		if err != nil {
			return false, fmt.Errorf("watermill: acked offset: %w", err)
		}
		return acked == lastOffset && tx == lastTx, nil
	})
}

// Stop implements Relay.
func (w *watermillRelay) Stop() error {
	w.once.Do(func() {
		w.err = w.fwd.Close()
		select {
		case err := <-w.done:
			if w.err == nil {
				w.err = err
			}
		case <-time.After(30 * time.Second):
			w.err = errors.New("forwarder did not stop within 30s")
		}
		_ = w.sub.Close()
		w.nc.Close()
		w.pool.Close()
	})
	return w.err
}
