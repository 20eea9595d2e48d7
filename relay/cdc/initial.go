package cdc

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/courier-go/courier/internal/waits"
	"github.com/courier-go/courier/store"
)

// A slot is made in three steps, so that it exists only once the rows
// written before it have been published:
//
//  1. A temporary slot is created with an exported snapshot: the rows that
//     snapshot sees are exactly those the slot's log does not hold.
//  2. The session publishes those rows from the table, oldest first, then
//     what the temporary slot streams, as any session does.
//  3. Once every row from the table is recorded (deleted, archived or a
//     dead letter), the session stops reading, lets what it handed over
//     finish, confirms its position and copies the temporary slot to the
//     relay's slot (pg_copy_logical_replication_slot), which starts there.
//     The next session reads that slot.
//
// A session that dies before step 3 takes its temporary slot with it, and
// the next one starts again from step 1: the rows are still in the table.
// A session on an existing slot therefore never reads the table, so its
// start costs the same whatever the backlog. Relays take turns to make a
// slot under a lock (Database.LockSlot); the others wait as standbys.

// make makes the slot (see above) on conn, a replication connection, and
// returns errMade once it exists, or errSlotBusy when another relay is
// making it.
func (r *Relay) make(ctx context.Context, conn *pgconn.PgConn) error {
	release, err := r.db.LockSlot(ctx, r.cfg.Slot)
	if errors.Is(err, store.ErrLocked) {
		return fmt.Errorf("%w: %w", errSlotBusy, err)
	}
	if err != nil {
		return err
	}
	defer release()
	if s, err := r.db.Slot(ctx, r.cfg.Slot); err != nil || s.Exists {
		if err != nil {
			return err
		}
		return errMade // by another relay meanwhile
	}
	temp := temporarySlot(r.cfg.Slot)
	res, err := pglogrepl.CreateReplicationSlot(ctx, conn, temp, "pgoutput", pglogrepl.CreateReplicationSlotOptions{
		Temporary: true, SnapshotAction: "EXPORT_SNAPSHOT", Mode: pglogrepl.LogicalReplication,
	})
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "42710": // a dead relay's, not yet dropped
		return fmt.Errorf("%w: slot %s exists", errSlotBusy, temp)
	case err != nil:
		return fmt.Errorf("cdc: create replication slot %s: %w (the database needs wal_level = logical, and the user REPLICATION)", temp, err)
	}
	// The snapshot lives until the replication connection's next command:
	// take it before starting to stream.
	table, err := r.db.ReadTable(ctx, res.SnapshotName)
	if err != nil {
		return err
	}
	defer table.Close(ctx)
	if err := r.start(ctx, conn, temp); err != nil {
		return err
	}
	r.log.Info("making the replication slot: publishing the rows in the table, then the log", "slot", r.cfg.Slot, "from", res.ConsistentPoint)
	return r.stream(ctx, conn, &making{slot: temp, table: table}, 0)
}

// temporarySlot names the temporary slot that makes slot.
func temporarySlot(slot string) string {
	return fmt.Sprintf("courier_making_%08x", crc32.ChecksumIEEE([]byte(slot)))
}

// sweep hands the rows in the table to out, oldest first, a page at a
// time, then a batch marked last.
func (r *Relay) sweep(ctx context.Context, table store.TableReader, out chan<- batch) error {
	after := int64(0)
	for {
		rows, err := table.Page(ctx, after, r.cfg.BatchSize)
		if err != nil {
			return err
		}
		page := make([]*item, len(rows))
		for i := range rows {
			page[i] = &item{LogItem: rows[i]}
		}
		last := len(page) < r.cfg.BatchSize
		if len(page) > 0 {
			after = page[len(page)-1].Seq
		}
		select {
		case out <- batch{items: page, last: last}:
		case <-ctx.Done():
			return ctx.Err()
		}
		if last {
			return nil
		}
	}
}

// copySlot waits until PostgreSQL holds temp's confirmed position at pos
// (the walsender applies a status update when it reads it), then copies
// temp to the relay's slot, which starts there. It returns errSlotGone if
// temp is gone meanwhile: its walsender ended, which drops a temporary
// slot (as a server that has just been promoted does to a walsender that
// connected while it was a standby), and the session starts again.
func (r *Relay) copySlot(ctx context.Context, temp string, pos uint64) error {
	for pos != 0 {
		s, err := r.db.Slot(ctx, temp)
		if err != nil {
			return err
		}
		if !s.Exists {
			return fmt.Errorf("%w: %s, while waiting for it to confirm %s", errSlotGone, temp, pglogrepl.LSN(pos))
		}
		if s.Confirmed >= pos {
			break
		}
		if !waits.Sleep(ctx, 5*time.Millisecond) {
			return ctx.Err()
		}
	}
	err := r.db.CopySlot(ctx, temp, r.cfg.Slot)
	if errors.Is(err, store.ErrSlotExists) {
		r.log.Warn("the replication slot was made meanwhile by something else than a relay: rows written before it are published only by the polling relay", "slot", r.cfg.Slot)
		return errMade
	}
	if err != nil {
		return err
	}
	r.log.Info("replication slot made: the rows written before it are published", "slot", r.cfg.Slot, "from", pglogrepl.LSN(pos))
	return errMade
}
