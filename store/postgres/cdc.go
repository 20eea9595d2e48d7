package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
)

// CDC is what the CDC relay (relay/cdc) asks of the database whose log it
// reads: its publication and replication slots, the decoding of the log,
// the table's rows while it makes its slot, and the writes of what the
// broker answered. Get one from a Driver.
type CDC struct {
	pool  *pgxpool.Pool
	clock store.Clock
}

// CDC returns what the CDC relay needs, on the driver's pool and clock.
func (d Driver) CDC() CDC { return CDC{pool: d.pool, clock: d.clock} }

// ReplicationConfig returns the configuration of a replication connection
// with the pool's settings.
func (c CDC) ReplicationConfig() *pgconn.Config {
	repl := c.pool.Config().ConnConfig.Config.Copy()
	if repl.RuntimeParams == nil {
		repl.RuntimeParams = map[string]string{}
	}
	repl.RuntimeParams["replication"] = "database"
	repl.RuntimeParams["application_name"] = "courier-cdc"
	return repl
}

// identifier is what a slot's or a publication's name may be.
var identifier = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// Setup creates the publication on courier_outbox and
// courier_outbox_scheduled when it does not exist, and adds
// courier_outbox_scheduled to one of courier_outbox that lacks it (made
// before scheduled messages existed), so that the relay learns of a
// scheduled message when its transaction commits. The database user must
// own the tables and have CREATE on the database (or be a superuser).
//
// Relays started together each call it, so it is safe to race: Setups of
// one publication take turns on an advisory lock held for their
// transaction (the next one finds the publication the previous one made),
// and a publication made or completed meanwhile by anything else (an
// older relay, an operator: CREATE PUBLICATION then fails with a unique
// violation, or "already exists", once that session commits) is looked
// at again rather than reported. Its errors name the cause: the tables
// missing (run courier migrate), or the user lacking a privilege.
func (c CDC) Setup(ctx context.Context, publication string) error {
	if !identifier.MatchString(publication) {
		return fmt.Errorf("postgres: publication %q: use 1 to 63 lower-case letters, digits and underscores", publication)
	}
	const attempts = 3
	for attempt := 1; ; attempt++ {
		made, err := c.setup(ctx, publication)
		if err == nil || !made || attempt == attempts {
			return err
		}
	}
}

// setup is one attempt of Setup, in one transaction. made reports that err
// is the publication or its table made meanwhile by another session: the
// next attempt finds it.
func (c CDC) setup(ctx context.Context, publication string) (made bool, err error) {
	err = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", "courier_cdc_publication:"+publication); err != nil {
			return fmt.Errorf("postgres: lock publication %s: %w", publication, err)
		}
		var exists, outbox, scheduled bool
		err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1),
       EXISTS (SELECT 1 FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid
               WHERE p.pubname = $1 AND r.prrelid = 'courier_outbox'::regclass),
       EXISTS (SELECT 1 FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid
               WHERE p.pubname = $1 AND r.prrelid = 'courier_outbox_scheduled'::regclass)`, publication).Scan(&exists, &outbox, &scheduled)
		if err != nil {
			return fmt.Errorf("postgres: look for publication %s: %w%s", publication, err, setupHint(err))
		}
		switch {
		case !exists:
			_, err = tx.Exec(ctx, "CREATE PUBLICATION "+publication+" FOR TABLE courier_outbox, courier_outbox_scheduled WITH (publish = 'insert')")
		case outbox && !scheduled:
			_, err = tx.Exec(ctx, "ALTER PUBLICATION "+publication+" ADD TABLE courier_outbox_scheduled")
		}
		if code := errorCode(err); code == uniqueViolation || code == duplicateObject {
			made = true
		}
		if err != nil {
			return fmt.Errorf("postgres: publication %s on courier_outbox and courier_outbox_scheduled: %w%s", publication, err, setupHint(err))
		}
		return nil
	})
	return made, err
}

// setupHint is what Setup's error adds to err, by its cause.
func setupHint(err error) string {
	switch errorCode(err) {
	case undefinedTable:
		return " (run courier migrate first)"
	case insufficientPrivilege:
		return " (the database user must own courier_outbox and courier_outbox_scheduled and have CREATE on the database, or be a superuser; or let an owner run the relay once to make the publication)"
	}
	return ""
}

// Release implements store.Releaser, as the polling relay's store does: the
// CDC relay releases scheduled messages into courier_outbox, from where the
// log brings them.
func (c CDC) Release(ctx context.Context, limit int) (store.Released, error) {
	return release(ctx, c.pool, c.clock, limit)
}

// Decoder returns a decoder of the log for this outbox: its rows and its
// table-less messages (those whose prefix names its courier_outbox).
func (c CDC) Decoder(ctx context.Context) (store.LogDecoder, error) {
	var prefix string
	if err := c.pool.QueryRow(ctx, "SELECT '"+logPrefix+"' || "+logTableSQL).Scan(&prefix); err != nil {
		return nil, fmt.Errorf("postgres: find courier_outbox: %w (run courier migrate first)", err)
	}
	return &outboxDecoder{prefix: prefix, relations: map[uint32]*pglogrepl.RelationMessage{}, types: pgtype.NewMap()}, nil
}

// Slot returns the state of the replication slot named slot.
func (c CDC) Slot(ctx context.Context, slot string) (store.SlotState, error) {
	s := store.SlotState{Exists: true}
	var confirmed pglogrepl.LSN
	// The failover flag is read through to_jsonb: the column exists from
	// PostgreSQL 17 on.
	err := c.pool.QueryRow(ctx, `SELECT active, active_pid, coalesce(wal_status, ''), coalesce(confirmed_flush_lsn, '0/0')::text,
    coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::bigint,
    coalesce((to_jsonb(s) ->> 'failover')::bool, false)
FROM pg_replication_slots AS s WHERE slot_name = $1`, slot).Scan(&s.Active, &s.PID, &s.WALStatus, &confirmed, &s.LagBytes, &s.Failover)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.SlotState{}, nil
	}
	if err != nil {
		return store.SlotState{}, fmt.Errorf("postgres: look at slot %s: %w", slot, err)
	}
	s.Confirmed = uint64(confirmed)
	return s, nil
}

// DropSlot drops the replication slot named slot.
func (c CDC) DropSlot(ctx context.Context, slot string) error {
	if _, err := c.pool.Exec(ctx, "SELECT pg_drop_replication_slot($1)", slot); err != nil {
		return fmt.Errorf("postgres: drop slot %s: %w", slot, err)
	}
	return nil
}

// CopySlot makes the replication slot to a copy of from: it starts where
// from's confirmed position is. It returns store.ErrSlotExists when to
// exists already.
func (c CDC) CopySlot(ctx context.Context, from, to string) error {
	_, err := c.pool.Exec(ctx, "SELECT pg_copy_logical_replication_slot($1, $2, false)", from, to)
	if errorCode(err) == duplicateObject {
		return fmt.Errorf("%w: %s", store.ErrSlotExists, to)
	}
	if err != nil {
		return fmt.Errorf("postgres: copy slot %s to %s: %w", from, to, err)
	}
	return nil
}

// LockSlot takes the advisory lock that lets one process at a time make
// the slot named slot, on a connection of its own that holds it until
// release closes it (or the process dies). It returns store.ErrLocked
// while another process holds it.
func (c CDC) LockSlot(ctx context.Context, slot string) (release func(), err error) {
	pc, err := c.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	conn := pc.Hijack()
	release = func() { _ = conn.Close(context.WithoutCancel(ctx)) }
	var got bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtext($1))", "courier_cdc_slot:"+slot).Scan(&got); err != nil {
		release()
		return nil, fmt.Errorf("postgres: lock slot %s: %w", slot, err)
	}
	if !got {
		release()
		return nil, fmt.Errorf("%w: slot %s", store.ErrLocked, slot)
	}
	return release, nil
}

// snapshotName is what an exported snapshot's name looks like
// (00000003-0000001B-1).
var snapshotName = regexp.MustCompile(`^[0-9A-F]+(-[0-9A-F]+)+$`)

// ReadTable reads the outbox's rows in the exported snapshot named
// snapshot (a replication slot's, when it was created).
func (c CDC) ReadTable(ctx context.Context, snapshot string) (store.TableReader, error) {
	if !snapshotName.MatchString(snapshot) {
		return nil, fmt.Errorf("postgres: unexpected snapshot name %q", snapshot)
	}
	tx, err := c.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("postgres: read the outbox: %w", err)
	}
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+snapshot+"'"); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("postgres: read the outbox in snapshot %s: %w", snapshot, err)
	}
	return tableReader{tx}, nil
}

// tableReader reads the outbox in one transaction.
type tableReader struct{ tx pgx.Tx }

var tablePageSQL = `SELECT id, ` + columns.Names + `
FROM courier_outbox WHERE id > $1 ORDER BY id LIMIT $2`

// Page implements store.TableReader.
func (t tableReader) Page(ctx context.Context, after int64, n int) ([]store.LogItem, error) {
	rows, err := t.tx.Query(ctx, tablePageSQL, after, n)
	if err != nil {
		return nil, fmt.Errorf("postgres: read the outbox: %w", err)
	}
	defer rows.Close()
	var (
		page  []store.LogItem
		it    store.LogItem
		dests = columns.AppendDests([]any{&it.Seq}, &it.Message)
	)
	for rows.Next() {
		it = store.LogItem{} // fresh payload and headers for the next row
		if err := rows.Scan(dests...); err != nil {
			return nil, fmt.Errorf("postgres: read the outbox: %w", err)
		}
		columns.Finish(&it.Message)
		page = append(page, it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: read the outbox: %w", err)
	}
	return page, nil
}

// Close implements store.TableReader.
func (t tableReader) Close(ctx context.Context) { _ = t.tx.Rollback(context.WithoutCancel(ctx)) }

// now is the store's clock's time, or the process's (the relay stamps
// what it writes of table-less messages with it).
func (c CDC) now() time.Time {
	if c.clock != nil {
		return c.clock()
	}
	return time.Now()
}

// history returns it's history not yet written, as JSON.
func history(it *store.LogItem) string {
	h := it.History
	if len(h) > columns.HistoryCap {
		h = h[len(h)-columns.HistoryCap:]
	}
	js, _ := json.Marshal(h)
	if h == nil {
		return "[]"
	}
	return string(js)
}
