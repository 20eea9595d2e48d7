package cdc

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"regexp"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/courier-go/courier/internal/waits"
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
// slot under an advisory lock; the others wait as standbys.

// make makes the slot (see above) on conn, a replication connection, and
// returns errMade once it exists, or errSlotBusy when another relay is
// making it.
func (r *Relay) make(ctx context.Context, conn *pgconn.PgConn) error {
	lock, err := r.lockMaking(ctx)
	if err != nil {
		return err
	}
	defer lock.Close(context.WithoutCancel(ctx)) // and the lock with it
	if exists, err := slotExists(ctx, conn, r.cfg.Slot); err != nil || exists {
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
	if !snapshotName.MatchString(res.SnapshotName) {
		return fmt.Errorf("cdc: slot %s: unexpected snapshot name %q", temp, res.SnapshotName)
	}
	// The snapshot lives until the replication connection's next command:
	// take it before starting to stream.
	tx, err := r.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("cdc: read the outbox: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+res.SnapshotName+"'"); err != nil {
		return fmt.Errorf("cdc: read the outbox in slot %s's snapshot: %w", temp, err)
	}
	if err := r.start(ctx, conn, temp); err != nil {
		return err
	}
	r.log.Info("making the replication slot: publishing the rows in the table, then the log", "slot", r.cfg.Slot, "from", res.ConsistentPoint)
	return r.stream(ctx, conn, &making{slot: temp, tx: tx})
}

// snapshotName is what an exported snapshot's name looks like
// (00000003-0000001B-1).
var snapshotName = regexp.MustCompile(`^[0-9A-F]+(-[0-9A-F]+)+$`)

// temporarySlot names the temporary slot that makes slot.
func temporarySlot(slot string) string {
	return fmt.Sprintf("courier_making_%08x", crc32.ChecksumIEEE([]byte(slot)))
}

// lockMaking takes the advisory lock that lets one relay at a time make
// the slot, on a connection of its own that holds it until closed; it
// returns errSlotBusy while another relay holds it.
func (r *Relay) lockMaking(ctx context.Context) (*pgx.Conn, error) {
	c, err := r.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("cdc: connect: %w", err)
	}
	conn := c.Hijack()
	var got bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtext($1))", "courier_cdc_slot:"+r.cfg.Slot).Scan(&got); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("cdc: lock slot %s: %w", r.cfg.Slot, err)
	}
	if !got {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("%w: another relay makes slot %s", errSlotBusy, r.cfg.Slot)
	}
	return conn, nil
}

// sweep hands the rows in the table to out, oldest first, a page at a
// time, all read in tx, then a batch marked last.
func (r *Relay) sweep(ctx context.Context, tx pgx.Tx, out chan<- batch) error {
	after := int64(0)
	for {
		page, err := r.sweepPage(ctx, tx, after)
		if err != nil {
			return err
		}
		last := len(page) < r.cfg.BatchSize
		if len(page) > 0 {
			after = page[len(page)-1].seq
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

// sweepPage reads the rows after id after in tx, oldest first.
func (r *Relay) sweepPage(ctx context.Context, tx pgx.Tx, after int64) ([]*item, error) {
	rows, err := tx.Query(ctx, sweepSQL, after, r.cfg.BatchSize)
	if err != nil {
		return nil, fmt.Errorf("cdc: read the outbox: %w", err)
	}
	defer rows.Close()
	var page []*item
	for rows.Next() {
		it := &item{}
		var version int32
		if err := rows.Scan(&it.seq, &it.msg.ID, &it.msg.Topic, &it.msg.Key, &it.msg.Type, &version,
			&it.msg.ContentType, &it.msg.Payload, &it.msg.Headers, &it.msg.OccurredAt); err != nil {
			return nil, fmt.Errorf("cdc: read the outbox: %w", err)
		}
		it.msg.Version = int(version)
		it.msg.OccurredAt = it.msg.OccurredAt.UTC()
		page = append(page, it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cdc: read the outbox: %w", err)
	}
	return page, nil
}

// copySlot waits until PostgreSQL holds temp's confirmed position at pos
// (the walsender applies a status update when it reads it), then copies
// temp to the relay's slot, which starts there.
func (r *Relay) copySlot(ctx context.Context, temp string, pos uint64) error {
	for pos != 0 {
		var at pglogrepl.LSN
		if err := r.pool.QueryRow(ctx, "SELECT coalesce(confirmed_flush_lsn, '0/0')::text FROM pg_replication_slots WHERE slot_name = $1", temp).Scan(&at); err != nil {
			return fmt.Errorf("cdc: look at slot %s: %w", temp, err)
		}
		if uint64(at) >= pos {
			break
		}
		if !waits.Sleep(ctx, 5*time.Millisecond) {
			return ctx.Err()
		}
	}
	_, err := r.pool.Exec(ctx, "SELECT pg_copy_logical_replication_slot($1, $2, false)", temp, r.cfg.Slot)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42710" {
		r.log.Warn("the replication slot was made meanwhile by something else than a relay: rows written before it are published only by the polling relay", "slot", r.cfg.Slot)
		return errMade
	}
	if err != nil {
		return fmt.Errorf("cdc: copy slot %s to %s: %w", temp, r.cfg.Slot, err)
	}
	r.log.Info("replication slot made: the rows written before it are published", "slot", r.cfg.Slot, "from", pglogrepl.LSN(pos))
	return errMade
}
