package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store/postgres"
)

// writeWriters is the number of concurrent business writers.
const writeWriters = 8

// ordersTable is the business table every write-path transaction inserts
// into.
const ordersTable = `CREATE TABLE orders (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    customer text NOT NULL,
    total integer NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now())`

// pipelinedCourier is the pseudo-system of runWrite that writes Courier's
// message in the same round trip as the business insert.
const pipelinedCourier = "courier_pipelined"

// runWrite measures business transactions per second with writeWriters
// concurrent writers, each transaction inserting one orders row and, unless
// system is "" (the plain-insert baseline), one message of system. With
// pipelinedCourier, the insert and Courier's message go to PostgreSQL in one
// pgx batch (postgres.QueueMessages). No relay runs.
func (b *Bench) runWrite(ctx context.Context, system string) error {
	name := system
	if name == "" {
		name = "plain"
	}
	pipelined := system == pipelinedCourier
	if pipelined {
		system = "courier"
	}
	env, err := newEnv(ctx, b.admin, b.cfg.pgURL, b.cfg.natsURL, name)
	if err != nil {
		return err
	}
	defer env.Close()
	if _, err := env.Pool.Exec(ctx, ordersTable); err != nil {
		return err
	}
	var w Writer
	if system != "" {
		sys, err := systemByName(system)
		if err != nil {
			return err
		}
		if err := sys.Prepare(ctx, env); err != nil {
			return fmt.Errorf("prepare: %w", err)
		}
		if w, err = sys.NewWriter(ctx, env); err != nil {
			return err
		}
	}
	var queue queueFunc
	if pipelined {
		queue = postgres.QueueMessages
	}
	v, err := b.measureWrite(ctx, env, w, queue)
	if err != nil {
		return err
	}
	switch {
	case system == "":
		b.results.Add("ref_plain_insert", reference, v)
	case pipelined:
		b.results.Add("ref_write_pipelined", reference, v)
	default:
		b.results.Add("write_tx", system, v)
	}
	return nil
}

// queueFunc queues messages into a pgx batch: postgres.QueueMessages or
// postgres.QueueLogMessages.
type queueFunc func(b *pgx.Batch, limits courier.Limits, msgs ...courier.Message) error

// measureWrite runs writeWriters writers on env (which has the orders
// table) for the write duration and returns their transactions per second:
// each inserts one orders row and, with w, one message; with queue
// instead, one Courier message queued with the insert into one pgx batch,
// in the insert's round trip.
func (b *Bench) measureWrite(ctx context.Context, env *Env, w Writer, queue queueFunc) (float64, error) {
	warmEnd := time.Now().Add(b.cfg.writeWarmup)
	end := warmEnd.Add(b.cfg.writeDuration)
	var count atomic.Int64
	var seq atomic.Int64
	var wg sync.WaitGroup
	var firstErr error
	var errOnce sync.Once
	for range writeWriters {
		wg.Go(func() {
			for {
				i := int(seq.Add(1))
				err := pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error {
					if queue != nil {
						var batch pgx.Batch
						batch.Queue("INSERT INTO orders (customer, total) VALUES ($1, $2)", keyFor(i, 10000), i)
						if err := queue(&batch, courier.Limits{}, courierMessage(keyFor(i, 10000), payloadFor(i))); err != nil {
							return err
						}
						return tx.SendBatch(ctx, &batch).Close()
					}
					if _, err := tx.Exec(ctx, "INSERT INTO orders (customer, total) VALUES ($1, $2)", keyFor(i, 10000), i); err != nil {
						return err
					}
					if w != nil {
						_, err := w.Write(ctx, tx, keyFor(i, 10000), payloadFor(i))
						return err
					}
					return nil
				})
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				now := time.Now()
				if now.After(end) {
					return
				}
				if now.After(warmEnd) {
					count.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return 0, firstErr
	}
	return float64(count.Load()) / b.cfg.writeDuration.Seconds(), nil
}
