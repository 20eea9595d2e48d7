package cdc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/courier-go/courier/internal/waits"
	"github.com/courier-go/courier/store"
)

// errSlotBusy is returned by a session when another relay reads the slot,
// or makes it.
var errSlotBusy = errors.New("cdc: the replication slot is read by another relay")

// errMade ends the session that made the slot: the next one reads it.
var errMade = errors.New("cdc: the replication slot was made")

// errSlotGone ends the session that makes the slot when its temporary slot
// is gone: the next session starts making it again.
var errSlotGone = errors.New("cdc: the temporary slot that makes the replication slot is gone; starting again")

// Run reads the log and publishes until ctx ends; it returns nil then. A
// relay whose slot another relay reads waits as a standby, trying every
// Standby; a lost connection (the database restarting, its walsender
// terminated) is retried with Backoff. When the slot does not exist, the
// relay makes it and publishes the rows already in the table first (see
// the package documentation).
func (r *Relay) Run(ctx context.Context) error {
	if err := r.db.Setup(ctx, r.cfg.Publication); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while it started: no failure
		}
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { r.releaseDue(ctx) })
	failures := 0
	standby := false
	for {
		err := r.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		delay := r.cfg.Standby
		switch {
		case errors.Is(err, errMade):
			standby, failures = false, 0
			continue
		case errors.Is(err, errSlotBusy):
			if !standby {
				r.log.Info("another relay reads the slot or makes it; waiting as a standby", "slot", r.cfg.Slot, "reason", err)
			}
			standby, failures = true, 0
		default:
			standby = false
			failures++
			delay = r.cfg.Backoff.Delay(failures)
			r.log.Warn("reading the log failed; starting again", "error", err, "retry_in", delay)
		}
		if !waits.Sleep(ctx, delay) {
			return nil
		}
	}
}

// releaseDue releases scheduled messages when they fall due, until ctx
// ends: every relay does, reading the slot or waiting as a standby
// (releases take turns in the database). The reader pokes the timer when
// the log brings a scheduling transaction.
func (r *Relay) releaseDue(ctx context.Context) {
	for {
		r.due.Release(ctx)
		t := time.NewTimer(r.due.Wait())
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-r.due.Poked():
		case <-t.C:
		}
		t.Stop()
	}
}

// session holds the slot once, until ctx ends or a part fails. When the
// slot does not exist it makes it instead (make) and returns errMade.
func (r *Relay) session(ctx context.Context) error {
	conn, err := pgconn.ConnectConfig(ctx, r.repl)
	if err != nil {
		return fmt.Errorf("cdc: replication connection: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	slot, err := r.db.Slot(ctx, r.cfg.Slot)
	if err != nil {
		return err
	}
	if !slot.Exists {
		return r.make(ctx, conn)
	}
	if !slot.Failover && failoverSlots(conn.ParameterStatus("server_version")) {
		if err := r.makeFailover(ctx, conn); err != nil {
			return err
		}
	}
	sys, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return fmt.Errorf("cdc: read the log's position: %w", err)
	}
	if err := r.start(ctx, conn, r.cfg.Slot); err != nil {
		return err
	}
	return r.stream(ctx, conn, nil, uint64(sys.XLogPos))
}

// failoverSlots reports whether a server of version (its server_version,
// such as "17.10" or "15.19 (Debian 15.19-0+deb12u1)") has failover slots:
// PostgreSQL 17 and later.
func failoverSlots(version string) bool {
	v := version
	end := strings.IndexFunc(v, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(v)
	}
	major, err := strconv.Atoi(v[:end])
	return err == nil && major >= 17
}

// makeFailover makes the relay's slot a failover slot
// (ALTER_REPLICATION_SLOT … (FAILOVER true)), before it is read: a
// standby that synchronizes slots (sync_replication_slots) keeps a copy of
// it, and a relay that follows the standby once it is promoted reads on
// from that copy, table-less messages included. Slots are made by copying
// a temporary one, which leaves the flag off, so each new slot gets it at
// its first session.
func (r *Relay) makeFailover(ctx context.Context, conn *pgconn.PgConn) error {
	err := conn.Exec(ctx, "ALTER_REPLICATION_SLOT "+r.cfg.Slot+" ( FAILOVER true )").Close()
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55006" { // object_in_use: another relay reads it
		return fmt.Errorf("%w: %s", errSlotBusy, pgErr.Message)
	}
	if err != nil {
		return fmt.Errorf("cdc: make slot %s a failover slot: %w", r.cfg.Slot, err)
	}
	r.log.Info("the replication slot is a failover slot: standbys that synchronize slots keep it", "slot", r.cfg.Slot)
	return nil
}

// start streams slot from its confirmed position.
func (r *Relay) start(ctx context.Context, conn *pgconn.PgConn, slot string) error {
	err := pglogrepl.StartReplication(ctx, conn, slot, 0, pglogrepl.StartReplicationOptions{
		Mode: pglogrepl.LogicalReplication,
		PluginArgs: []string{
			"proto_version '1'",
			fmt.Sprintf("publication_names '%s'", r.cfg.Publication),
			"binary 'true'",
			"messages 'true'",
		},
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55006" { // object_in_use
		return fmt.Errorf("%w: %s", errSlotBusy, pgErr.Message)
	}
	if errors.As(err, &pgErr) && pgErr.Code == "55000" {
		if s, serr := r.db.Slot(ctx, slot); serr == nil && s.WALStatus == "lost" {
			return r.dropLost(ctx, err)
		}
	}
	if err != nil {
		return fmt.Errorf("cdc: start replication on slot %s: %w", slot, err)
	}
	return nil
}

// dropLost drops the slot PostgreSQL invalidated (max_slot_wal_keep_size):
// the log it needed is gone. The rows are still in the table; the next
// session makes a new slot and publishes them (table-less messages it had
// not confirmed are lost with it). It returns err, the failure that showed
// the slot lost.
func (r *Relay) dropLost(ctx context.Context, err error) error {
	r.log.Error("the replication slot is lost; making a new one and publishing the table's rows", "slot", r.cfg.Slot, "error", err)
	if derr := r.db.DropSlot(ctx, r.cfg.Slot); derr != nil {
		return fmt.Errorf("cdc: drop lost slot %s: %w", r.cfg.Slot, derr)
	}
	return fmt.Errorf("cdc: slot %s was lost: %w", r.cfg.Slot, err)
}

// stream publishes what conn streams (replication started) until ctx ends
// or a part fails. With first (the session that makes the slot), the rows
// first reads from the table go before the log's transactions, and the
// session ends with errMade once the slot is made. before is the log's
// position as the session began (see publisher.before).
func (r *Relay) stream(ctx context.Context, conn *pgconn.PgConn, first *making, before uint64) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	decoder, err := r.db.Decoder(ctx)
	if err != nil {
		return err
	}
	held, err := r.db.Held(ctx)
	if err != nil {
		return err
	}
	if len(r.cfg.HoldKeys) == 0 && len(held) == 0 {
		before = 0 // no key is held, nor was one released: nothing to check
	}
	in := make(chan batch, 16)
	prog := &progress{}
	p := &publisher{r: r, prog: prog, keys: map[string]*key{}, held: map[string]bool{}, holding: map[string]int{}, before: before}
	for k := range held {
		p.held[k] = true
	}
	rd := &reader{r: r, conn: conn, slot: r.cfg.Slot, prog: prog, out: in, decoder: decoder, lastSent: r.cfg.Clock.Now()}
	var swept chan struct{}
	if first != nil {
		swept = make(chan struct{})
		read := make(chan struct{})
		recorded := make(chan struct{})
		p.recorded = recorded
		rd.slot, rd.read, rd.recorded = first.slot, read, recorded
		go func() {
			defer close(swept)
			if err := r.sweep(ctx, first.table, in); err != nil {
				r.log.Warn("could not read the rows in the table", "error", err)
				cancel() // the session starts again
				return
			}
			close(read)
		}()
	}
	published := make(chan error, 1)
	go func() {
		published <- r.publish(ctx, in, p)
		cancel() // a publisher that gave up ends the session
	}()
	r.m.setReading(true, first != nil)
	defer r.m.setReading(false, false)
	err = rd.run(ctx)
	cancel()
	if swept != nil {
		<-swept
	}
	if perr := <-published; perr != nil && !errors.Is(perr, context.Canceled) && (err == nil || errors.Is(err, context.Canceled)) {
		err = perr
	}
	return err
}

// making is the state of the session that makes the slot.
type making struct {
	slot  string            // the temporary slot read meanwhile
	table store.TableReader // the table, as it was at the temporary slot's start
}
