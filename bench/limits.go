package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/postgres"
)

// runRefPGQueue measures the database's own ceiling for a relay's claim and
// mark: a minimal queue table, one claimer taking batches of 1000 with
// SELECT … FOR UPDATE SKIP LOCKED and deleting them in the same
// transaction.
func (b *Bench) runRefPGQueue(ctx context.Context) error {
	env, err := newEnv(ctx, b.admin, b.cfg.pgURL, b.cfg.natsURL, "pgqueue")
	if err != nil {
		return err
	}
	defer env.Close()
	n := b.cfg.limitsN
	_, err = env.Pool.Exec(ctx, `CREATE TABLE bench_queue (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, payload bytea NOT NULL)`)
	if err == nil {
		_, err = env.Pool.Exec(ctx, `INSERT INTO bench_queue (payload) SELECT $1::bytea FROM generate_series(1, $2)`, payloadFor(0), n)
	}
	if err != nil {
		return err
	}
	conn, err := env.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	start := time.Now()
	done := 0
	for done < n {
		var ids []int64
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `SELECT id, payload FROM bench_queue ORDER BY id LIMIT 1000 FOR UPDATE SKIP LOCKED`)
			if err != nil {
				return err
			}
			var id int64
			var payload []byte
			_, err = pgx.ForEachRow(rows, []any{&id, &payload}, func() error { ids = append(ids, id); return nil })
			if err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `DELETE FROM bench_queue WHERE id = ANY($1)`, ids)
			return err
		})
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			return fmt.Errorf("queue empty after %d of %d rows", done, n)
		}
		done += len(ids)
	}
	b.results.Add("ref_pg_queue", reference, float64(n)/time.Since(start).Seconds())
	return nil
}

// runRefJSAsync measures JetStream's ceiling for a relay's publish: raw
// asynchronous publishes of Courier-shaped messages, then waiting for every
// ack.
func (b *Bench) runRefJSAsync(ctx context.Context) error {
	env, err := newEnv(ctx, b.admin, b.cfg.pgURL, b.cfg.natsURL, "jsraw")
	if err != nil {
		return err
	}
	defer env.Close()
	n := b.cfg.limitsN
	mapping := couriernats.Config{SubjectPrefix: env.Prefix}
	msgs := make([]*natsgo.Msg, n)
	for i := range msgs {
		m := courierMessage(keyFor(i, 10000), payloadFor(i))
		msgs[i] = mapping.ToNATS(&m)
	}
	nc, err := natsgo.Connect(b.cfg.natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(16384))
	if err != nil {
		return err
	}
	start := time.Now()
	futures := make([]jetstream.PubAckFuture, n)
	for i, m := range msgs {
		if futures[i], err = js.PublishMsgAsync(m); err != nil {
			return err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(2 * time.Minute):
		return errors.New("acks did not arrive within 2 minutes")
	}
	elapsed := time.Since(start)
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("publish: %w", err)
		}
	}
	b.results.Add("ref_js_async", reference, float64(n)/elapsed.Seconds())
	return nil
}

// runLimitDB measures a system's database side with no broker: Courier's
// Claim+Complete loop (batches of 1000), Watermill's forwarder with a
// publisher that discards, River with a worker that does nothing.
func (b *Bench) runLimitDB(ctx context.Context, system string) error {
	env, err := newEnv(ctx, b.admin, b.cfg.pgURL, b.cfg.natsURL, system)
	if err != nil {
		return err
	}
	defer env.Close()
	n := b.cfg.limitsN
	var sys System
	switch system {
	case "courier":
		sys = &courierSystem{}
	case "watermill":
		sys = &watermillSystem{noBroker: true}
	case "river":
		sys = &riverSystem{noop: true}
	default:
		return fmt.Errorf("unknown system %q", system)
	}
	if err := sys.Prepare(ctx, env); err != nil {
		return err
	}
	if err := sys.Fill(ctx, env, n, 10000); err != nil {
		return err
	}
	var elapsed time.Duration
	if system == "courier" {
		if elapsed, err = courierClaimComplete(ctx, env, n); err != nil {
			return err
		}
	} else {
		res, r := drainOnce(sys, &drainSpec{Env: *env, N: n})
		if r != nil {
			if err := r.Stop(); err != nil {
				return err
			}
		}
		if res.Error != "" {
			return errors.New(res.Error)
		}
		elapsed = res.Elapsed
	}
	b.results.Add("limit_db", system, float64(n)/elapsed.Seconds())
	return nil
}

// courierClaimComplete drains n messages with Courier's store alone:
// Claim 1000, Complete them all as published, repeat.
func courierClaimComplete(ctx context.Context, env *Env, n int) (time.Duration, error) {
	pool, err := newPool(ctx, env.RelayURL, 4)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	st, err := postgres.NewDriver(pool).RelayStore(ctx, store.RelayConfig{})
	if err != nil {
		return 0, err
	}
	const owner = "bench-claim-complete"
	start := time.Now()
	for done := 0; done < n; {
		batch, err := st.Claim(ctx, owner, 1000, 30*time.Second)
		if err != nil {
			return 0, err
		}
		if len(batch.Records) == 0 {
			return 0, fmt.Errorf("nothing to claim after %d of %d", done, n)
		}
		ids := make([]int64, len(batch.Records))
		for i, r := range batch.Records {
			ids[i] = r.Seq
		}
		if err := st.Complete(ctx, owner, batch.Lease, store.Outcome{Published: ids}); err != nil {
			return 0, err
		}
		done += len(ids)
	}
	return time.Since(start), nil
}

// runLimitBroker measures a system's broker side with no database:
// Courier's Publisher.Publish in batches of 1000; watermill-nats's
// publisher called once per message, as the forwarder calls it; River's
// worker publish (a synchronous PublishMsg) from riverMaxWorkers
// goroutines, as River's workers would run it.
func (b *Bench) runLimitBroker(ctx context.Context, system string) error {
	env, err := newEnv(ctx, b.admin, b.cfg.pgURL, b.cfg.natsURL, system)
	if err != nil {
		return err
	}
	defer env.Close()
	n := b.cfg.limitsN
	nc, err := natsgo.Connect(b.cfg.natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	var elapsed time.Duration
	switch system {
	case "courier":
		pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: couriernats.Config{SubjectPrefix: env.Prefix}})
		if err != nil {
			return err
		}
		msgs := make([]courier.Message, n)
		for i := range msgs {
			msgs[i] = courierMessage(keyFor(i, 10000), payloadFor(i))
		}
		start := time.Now()
		for i := 0; i < n; i += 1000 {
			for _, err := range pub.Publish(ctx, msgs[i:min(n, i+1000)]) {
				if err != nil {
					return err
				}
			}
		}
		elapsed = time.Since(start)
	case "watermill":
		pub, err := newWatermillNATSPublisher(nc)
		if err != nil {
			return err
		}
		n = b.cfg.syncN // one synchronous publish after another: fewer, to save time
		start := time.Now()
		for i := range n {
			if err := pub.Publish(env.Subject(), watermillMessage(keyFor(i, 10000), payloadFor(i))); err != nil {
				return err
			}
		}
		elapsed = time.Since(start)
	case "river":
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		jobs := make(chan int, n)
		for i := range n {
			jobs <- i
		}
		close(jobs)
		var wg sync.WaitGroup
		var firstErr error
		var once sync.Once
		start := time.Now()
		for range riverMaxWorkers {
			wg.Go(func() {
				for i := range jobs {
					m := benchNATSMsg(env.Subject(), randomToken(16), keyFor(i, 10000), time.Now(), payloadFor(i))
					if _, err := js.PublishMsg(ctx, m); err != nil {
						once.Do(func() { firstErr = err })
						return
					}
				}
			})
		}
		wg.Wait()
		elapsed = time.Since(start)
		if firstErr != nil {
			return firstErr
		}
	default:
		return fmt.Errorf("unknown system %q", system)
	}
	if err := b.checkStream(ctx, env, n); err != nil {
		return err
	}
	b.results.Add("limit_broker", system, float64(n)/elapsed.Seconds())
	return nil
}
