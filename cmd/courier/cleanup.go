package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/cleanup"
)

// retentionFlags say how long each table keeps its rows; `courier cleanup`
// and `courier relay --cleanup-every` share them. Their variables are
// named without a prefix, which each command adds: COURIER_ for cleanup,
// COURIER_CLEANUP_ for relay.
type retentionFlags struct {
	KeepPublished     time.Duration `name:"keep-published" help:"Delete copies of published messages (relay --keep-published) older than this, e.g. 168h (0: keep them)." env:"KEEP_PUBLISHED_FOR"`
	KeepInboxMarkers  time.Duration `name:"keep-inbox-markers" help:"Delete consumers' dedup markers older than this, e.g. 720h; keep them longer than any redelivery can come late (0: keep them)." env:"KEEP_INBOX_MARKERS"`
	KeepInboxFailures time.Duration `name:"keep-inbox-failures" help:"Delete records of failed handler runs older than this that were left behind (0: keep them)." default:"168h" env:"KEEP_INBOX_FAILURES"`
	ExpiredKeys       bool          `name:"expired-keys" help:"Delete Idempotency-Key records past their expiry (default; the --no- form keeps them)." default:"true" negatable:"" env:"EXPIRED_KEYS"`
	KeepSagas         time.Duration `name:"keep-sagas" help:"Delete completed and cancelled sagas, with their history, finished longer ago than this (0: keep them)." env:"KEEP_SAGAS"`
	KeepDeadLetters   time.Duration `name:"keep-dead-letters" help:"Delete relay-side dead letters older than this, unreplayed (0: keep them until discarded)." env:"KEEP_DEAD_LETTERS"`
	KeepParked        time.Duration `name:"keep-parked" help:"Delete consume-side parked messages older than this, unreplayed (0: keep them until discarded)." env:"KEEP_PARKED"`
	KeepReleased      time.Duration `name:"keep-released" help:"Delete the records of scheduled messages released longer ago than this; until then cancelling one says it was published (0: keep them)." default:"720h" env:"KEEP_RELEASED"`
	KeepLatency       time.Duration `name:"keep-latency" help:"Delete consumers' end-to-end latency samples recorded longer ago than this; the dashboard's latency reaches back as far (0: keep them)." default:"168h" env:"KEEP_LATENCY"`
	Batch             int           `help:"Rows deleted per transaction; small batches keep writers from waiting." default:"1000" env:"BATCH"`
	Pause             time.Duration `help:"Pause between two batches, giving way to writers (0: none, as fast as it goes)." default:"25ms" env:"PAUSE"`
}

// keep returns the retention of each table to trim, and an error naming a
// flag that is out of range.
func (f retentionFlags) keep(prefix string) (map[store.Table]time.Duration, error) {
	keep := map[store.Table]time.Duration{}
	for _, r := range []struct {
		flag  string
		table store.Table
		d     time.Duration
	}{
		{"keep-published", store.TablePublished, f.KeepPublished},
		{"keep-inbox-markers", store.TableInboxMarkers, f.KeepInboxMarkers},
		{"keep-inbox-failures", store.TableInboxFailures, f.KeepInboxFailures},
		{"keep-sagas", store.TableSagas, f.KeepSagas},
		{"keep-dead-letters", store.TableDeadLetters, f.KeepDeadLetters},
		{"keep-parked", store.TableParked, f.KeepParked},
		{"keep-released", store.TableReleased, f.KeepReleased},
		{"keep-latency", store.TableLatency, f.KeepLatency},
	} {
		if r.d < 0 {
			return nil, fmt.Errorf("--%s%s is %s: use a positive duration, or 0 to keep the rows", prefix, r.flag, r.d)
		}
		if r.d > 0 {
			keep[r.table] = r.d
		}
	}
	if f.ExpiredKeys {
		keep[store.TableKeys] = 0
	}
	if f.Batch < 1 {
		return nil, fmt.Errorf("--%sbatch is %d: use 1 or more (default 1000)", prefix, f.Batch)
	}
	if f.Pause < 0 {
		return nil, fmt.Errorf("--%spause is %s: use 0 or more", prefix, f.Pause)
	}
	return keep, nil
}

// cleaner returns the Cleaner of these flags on ops.
func (f retentionFlags) cleaner(e *env, ops store.Operations, keep map[store.Table]time.Duration) *cleanup.Cleaner {
	pause := f.Pause
	if pause == 0 {
		pause = -1 // none
	}
	return &cleanup.Cleaner{Ops: ops, Keep: keep, Batch: f.Batch, Pause: pause, Log: e.log}
}

type cleanupCmd struct {
	dbFlags
	retentionFlags `embed:"" envprefix:"COURIER_"`
	JSON           bool `help:"Print JSON instead of a table." env:"COURIER_JSON"`
}

func (c *cleanupCmd) Run(e *env) error {
	keep, err := c.keep("")
	if err != nil {
		return err
	}
	if len(keep) == 0 {
		return fmt.Errorf("nothing to clean up: pass a retention such as --keep-published 168h or --keep-inbox-markers 720h (see courier cleanup --help)")
	}
	if err := c.checkTenants(); err != nil {
		return err
	}
	if c.tenanted() && c.Tenant == "" {
		return c.cleanTenants(e, keep)
	}
	d, err := c.open(e.ctx, false, "")
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.CheckSchema(e.ctx); err != nil {
		return err
	}
	start := time.Now()
	rep, err := c.cleaner(e, d.Operations(), keep).RunOnce(e.ctx)
	if err != nil {
		return err
	}
	if c.JSON {
		return writeJSON(e, rep)
	}
	if rep.Locked {
		fmt.Fprintln(e.stdout, "another cleanup is running on this database; nothing done")
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "TABLE\tretention\tdeleted\t")
	for _, t := range store.Tables {
		if k, ok := keep[t]; ok {
			ret := k.String()
			if t == store.TableKeys {
				ret = "expiry"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t\n", t, ret, rep.Deleted[t])
		}
	}
	fmt.Fprintf(tw, "took\t\t%s\t\n", time.Since(start).Round(time.Millisecond))
	return tw.Flush()
}

// backgroundCleanup starts the relay's cleanup every interval on ops and
// returns a function that stops it and waits until it has.
func backgroundCleanup(e *env, f retentionFlags, keep map[store.Table]time.Duration, ops store.Operations, every time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = f.cleaner(e, ops, keep).Run(ctx, every)
	}()
	e.log.Info("cleanup every", "interval", every, "tables", len(keep))
	return func() {
		cancel()
		<-done
	}
}

// relayCleanup are the flags of `courier relay` that run a cleanup in the
// background: --cleanup-every and the retentions, prefixed --cleanup-.
type relayCleanup struct {
	Every time.Duration `help:"Run a cleanup (see courier cleanup) this often while relaying, e.g. 10m; one relay at a time does it (0: never)." env:"EVERY"`
	retentionFlags
	tables map[store.Table]time.Duration // the retentions, once checked
}

// check validates the flags and keeps the retentions they give.
func (c *relayCleanup) check() error {
	if c.Every < 0 {
		return fmt.Errorf("--cleanup-every is %s: use a positive duration such as 10m, or 0 for no cleanup", c.Every)
	}
	if c.Every == 0 {
		return nil
	}
	var err error
	c.tables, err = c.keep("cleanup-")
	return err
}
