package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier/broker/brokerurl"
	"github.com/courier-go/courier/metrics"
	"github.com/courier-go/courier/relay/cdc"
	"github.com/courier-go/courier/store/dburl"
	"github.com/courier-go/courier/store/postgres"
)

// cdcFlags are the flags of `courier relay --mode cdc`.
type cdcFlags struct {
	Mode        string `help:"How the relay finds new messages: poll (claim them from the table) or cdc (read PostgreSQL's write-ahead log through a logical replication slot; needs wal_level = logical and a user with REPLICATION). A second cdc relay on the same slot waits as a hot standby. With --metrics-addr, /metrics adds the slot's lag and the relay's counters, and /readyz says whether it reads the slot or waits as a standby." enum:"poll,cdc" default:"poll" env:"COURIER_RELAY_MODE"`
	Slot        string `help:"Logical replication slot of --mode cdc; made when missing." default:"courier_outbox" env:"COURIER_SLOT"`
	Publication string `help:"Publication on courier_outbox of --mode cdc; made when missing." default:"courier_outbox" env:"COURIER_PUBLICATION"`
}

// checkCDC validates the CDC flags for dialect.
func (f cdcFlags) checkCDC(dialect string) error {
	if f.Mode != "cdc" {
		return nil
	}
	if dialect != "postgres" {
		return fmt.Errorf("--mode cdc reads PostgreSQL's write-ahead log: pass a postgres:// --database-url, or use --mode poll on %s", dialect)
	}
	if err := (cdc.Config{Slot: f.Slot, Publication: f.Publication}).Validate(); err != nil {
		return flagError(err)
	}
	return nil
}

// runCDC relays from the log until the command's context ends, serving
// /metrics, /healthz and /readyz with --metrics-addr (d's Operations give
// the gauges), and audits what it publishes with --audit.
func (c *relayCmd) runCDC(e *env, d *dburl.DB, b *brokerurl.Broker) error {
	pool, err := pgxpool.New(e.ctx, c.DatabaseURL)
	if err != nil {
		return fmt.Errorf("--database-url: %w", err)
	}
	defer pool.Close()
	r, err := cdc.New(postgres.NewDriver(pool).CDC(), b, cdc.Config{
		Slot: c.Slot, Publication: c.Publication, BatchSize: c.BatchSize, Concurrency: c.Concurrency, MaxAttempts: c.MaxAttempts,
		KeepPublished: c.KeepPublished, HoldKeys: c.HoldKeys, Logger: e.log,
	})
	if err != nil {
		return flagError(err)
	}
	obs, err := c.observeFlags.listen(d.Operations())
	if err != nil {
		return err
	}
	var col *metrics.Collector
	if obs != nil {
		col = obs.col
	}
	w, stopAudit, err := c.startAudit(e, d, b, col)
	if err != nil {
		if obs != nil {
			_ = obs.ln.Close()
		}
		return err
	}
	defer stopAudit()
	if obs != nil {
		defer obs.ln.Close()
		if w != nil {
			obs.checks = map[string]func(context.Context) (string, error){"audit": w.Ready}
		}
		stop, err := obs.serveCDC(e, r, pool, b)
		if err != nil {
			return err
		}
		defer stop()
	}
	e.log.Info("relaying from the log", "slot", c.Slot, "publication", c.Publication, "broker", b.String())
	return r.Run(e.ctx)
}
