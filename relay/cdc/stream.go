package cdc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/courier-go/courier/internal/waits"
	"github.com/courier-go/courier/store/postgres"
)

// errSlotBusy is returned by open when another connection reads the slot.
var errSlotBusy = errors.New("cdc: the replication slot is read by another relay")

// batch is what the reader hands the publisher: a committed transaction's
// messages (t set), or a page of rows swept from the table (t nil).
type batch struct {
	items []*item
	t     *txn
}

// progress is shared by the reader and the publisher.
type progress struct {
	confirmed atomic.Uint64 // the position every transaction before which is done
	handed    atomic.Int64  // transactions handed to the publisher
	done      atomic.Int64  // transactions the publisher finished
}

// reader owns the replication connection.
type reader struct {
	r         *Relay
	conn      *pgconn.PgConn
	prog      *progress
	out       chan<- batch
	relations map[uint32]*pglogrepl.RelationMessage
	types     *pgtype.Map
	prefix    string         // the prefix of this outbox's table-less messages: postgres.LogPrefix and its table's OID
	cur       *batch         // the transaction being received
	swept     chan *snapshot // the snapshot the table's rows were read in, once read
	skip      *snapshot      // what swept gave
	xid       uint32         // the transaction being received
	received  uint64         // the end of what the server sent so far
	lastSent  time.Time
}

// open connects for replication and makes the slot when it does not exist.
func (r *Relay) open(ctx context.Context) (*pgconn.PgConn, error) {
	conn, err := pgconn.ConnectConfig(ctx, r.repl)
	if err != nil {
		return nil, fmt.Errorf("cdc: replication connection: %w", err)
	}
	fail := func(err error) (*pgconn.PgConn, error) {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	var exists bool
	rows, err := conn.Exec(ctx, fmt.Sprintf("SELECT 1 FROM pg_replication_slots WHERE slot_name = '%s'", r.cfg.Slot)).ReadAll()
	if err != nil {
		return fail(fmt.Errorf("cdc: look for slot %s: %w", r.cfg.Slot, err))
	}
	exists = len(rows) == 1 && len(rows[0].Rows) == 1
	if !exists {
		_, err := pglogrepl.CreateReplicationSlot(ctx, conn, r.cfg.Slot, "pgoutput", pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication})
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && pgErr.Code == "42710": // made meanwhile
		case err != nil:
			return fail(fmt.Errorf("cdc: create replication slot %s: %w (the database needs wal_level = logical, and the user REPLICATION)", r.cfg.Slot, err))
		default:
			r.log.Info("replication slot created", "slot", r.cfg.Slot)
		}
	}
	return conn, nil
}

// slotLost reports whether PostgreSQL invalidated the slot (wal_status
// lost).
func (r *Relay) slotLost(ctx context.Context) bool {
	var status string
	err := r.pool.QueryRow(ctx, "SELECT coalesce(wal_status, '') FROM pg_replication_slots WHERE slot_name = $1", r.cfg.Slot).Scan(&status)
	return err == nil && status == "lost"
}

// dropLost drops the slot PostgreSQL invalidated (max_slot_wal_keep_size):
// the log it needed is gone. The rows are still in the table; a new slot
// and the table's rows at the next start lose nothing of them (table-less
// messages it had not confirmed are lost with it). It returns err, the
// failure that showed the slot lost.
func (r *Relay) dropLost(ctx context.Context, err error) error {
	r.log.Error("the replication slot is lost; making a new one and publishing the table's rows", "slot", r.cfg.Slot, "error", err)
	if _, derr := r.pool.Exec(ctx, "SELECT pg_drop_replication_slot($1)", r.cfg.Slot); derr != nil {
		return fmt.Errorf("cdc: drop lost slot %s: %w", r.cfg.Slot, derr)
	}
	return fmt.Errorf("cdc: slot %s was lost: %w", r.cfg.Slot, err)
}

// start streams from the slot's confirmed position.
func (r *Relay) start(ctx context.Context, conn *pgconn.PgConn) error {
	err := pglogrepl.StartReplication(ctx, conn, r.cfg.Slot, 0, pglogrepl.StartReplicationOptions{
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
	if errors.As(err, &pgErr) && pgErr.Code == "55000" && r.slotLost(ctx) {
		return r.dropLost(ctx, err)
	}
	if err != nil {
		return fmt.Errorf("cdc: start replication on slot %s: %w", r.cfg.Slot, err)
	}
	return nil
}

// run reads the stream until ctx ends or the connection fails, handing
// committed transactions to out and confirming prog.confirmed.
func (rd *reader) run(ctx context.Context) error {
	for {
		if time.Since(rd.lastSent) >= rd.r.cfg.StatusInterval {
			if err := rd.status(ctx, false); err != nil {
				return err
			}
		}
		rctx, cancel := context.WithDeadline(ctx, rd.lastSent.Add(rd.r.cfg.StatusInterval))
		raw, err := rd.conn.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if pgconn.Timeout(err) {
				continue
			}
			return fmt.Errorf("cdc: read the log: %w", err)
		}
		switch msg := raw.(type) {
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("cdc: the server ended the stream: %w", pgconn.ErrorResponseToPgError(msg))
		case *pgproto3.CopyData:
			if err := rd.copyData(ctx, msg.Data); err != nil {
				return err
			}
		}
	}
}

// status tells the server the confirmed position: written, flushed and
// applied are all the position before which every transaction is done,
// never merely what was received.
func (rd *reader) status(ctx context.Context, reply bool) error {
	pos := pglogrepl.LSN(rd.prog.confirmed.Load())
	if pos == 0 {
		rd.lastSent = time.Now()
		return nil // nothing confirmed yet: the slot keeps its own position
	}
	err := pglogrepl.SendStandbyStatusUpdate(ctx, rd.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pos, WALFlushPosition: pos, WALApplyPosition: pos, ReplyRequested: reply,
	})
	if err != nil {
		return fmt.Errorf("cdc: confirm position %s: %w", pos, err)
	}
	rd.r.m.setConfirmed(uint64(pos))
	rd.lastSent = time.Now()
	return nil
}

// reply answers a keepalive that asks for one (the server does when it shuts
// down, and waits for it): it reports what was received as written, and no
// flush position, which leaves the slot where it was confirmed. Reporting
// the confirmed position alone would keep a shutting-down server waiting
// for work the relay cannot finish without it.
func (rd *reader) reply() error {
	buf := make([]byte, 0, 34)
	buf = append(buf, pglogrepl.StandbyStatusUpdateByteID)
	buf = binary.BigEndian.AppendUint64(buf, rd.received)
	buf = binary.BigEndian.AppendUint64(buf, 0) // flush: none
	buf = binary.BigEndian.AppendUint64(buf, 0) // apply: none
	buf = binary.BigEndian.AppendUint64(buf, uint64(time.Since(pgEpoch).Microseconds()))
	buf = append(buf, 0)
	msg, err := (&pgproto3.CopyData{Data: buf}).Encode(nil)
	if err != nil {
		return err
	}
	if err := rd.conn.Frontend().SendUnbufferedEncodedCopyData(msg); err != nil {
		return fmt.Errorf("cdc: answer the server's keepalive: %w", err)
	}
	return nil
}

// pgEpoch is the zero of PostgreSQL's timestamps.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

func (rd *reader) copyData(ctx context.Context, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("cdc: keepalive: %w", err)
		}
		// Between transactions, with every one handed over done, the
		// slot may move to the end of the log: what lies before it is
		// other tables' changes.
		if rd.cur == nil && rd.prog.handed.Load() == rd.prog.done.Load() {
			advance(&rd.prog.confirmed, uint64(ka.ServerWALEnd))
		}
		rd.received = max(rd.received, uint64(ka.ServerWALEnd))
		if ka.ReplyRequested {
			return rd.reply()
		}
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("cdc: log data: %w", err)
		}
		rd.received = max(rd.received, uint64(xld.WALStart)+uint64(len(xld.WALData)))
		m, err := pglogrepl.Parse(xld.WALData)
		if err != nil {
			return fmt.Errorf("cdc: decode pgoutput: %w", err)
		}
		return rd.logical(ctx, m)
	}
	return nil
}

// logical handles one pgoutput message.
func (rd *reader) logical(ctx context.Context, m pglogrepl.Message) error {
	switch m := m.(type) {
	case *pglogrepl.RelationMessage:
		rd.relations[m.RelationID] = m
	case *pglogrepl.BeginMessage:
		rd.cur = &batch{t: &txn{}}
		rd.xid = m.Xid
	case *pglogrepl.InsertMessage:
		rel, ok := rd.relations[m.RelationID]
		if !ok || rd.cur == nil {
			return fmt.Errorf("cdc: an insert into relation %d outside a transaction or before its description", m.RelationID)
		}
		if rel.RelationName != "courier_outbox" {
			return nil
		}
		it, err := rd.decode(rel, m.Tuple)
		if err != nil {
			return err
		}
		it.txn = rd.cur.t
		rd.cur.items = append(rd.cur.items, it)
	case *pglogrepl.LogicalDecodingMessage:
		if m.Prefix != rd.prefix {
			return nil // not table-less outbox messages, or another schema's
		}
		if !m.Transactional || rd.cur == nil {
			rd.r.log.Warn("ignoring a non-transactional log message with the outbox's prefix", "prefix", m.Prefix, "lsn", m.LSN)
			return nil
		}
		msg, err := postgres.DecodeLogMessage(m.Content)
		if err != nil {
			return fmt.Errorf("cdc: at %s: %w", m.LSN, err)
		}
		if msg.Payload == nil {
			msg.Payload = []byte{}
		}
		rd.cur.items = append(rd.cur.items, &item{msg: msg, txn: rd.cur.t})
	case *pglogrepl.CommitMessage:
		b := rd.cur
		rd.cur = nil
		if b == nil {
			return nil
		}
		b.t.end = uint64(m.TransactionEndLSN)
		return rd.hand(ctx, b, rd.xid)
	}
	return nil
}

// hand gives a committed transaction to the publisher, once the rows in the
// table have been taken, without the rows taken from there; it confirms the
// position meanwhile should that take a while.
func (rd *reader) hand(ctx context.Context, b *batch, xid uint32) error {
	tick := time.NewTicker(rd.r.cfg.StatusInterval)
	defer tick.Stop()
	for rd.skip == nil {
		select {
		case rd.skip = <-rd.swept:
		case <-tick.C:
			if err := rd.status(ctx, false); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if rd.skip.sees(xid) && !rd.skip.logged[xid] {
		// Committed before the table was read, yet not among the
		// transactions the slot held then (a row inserted in a
		// subtransaction carries that one's id): its rows were swept
		// (published from there) or were published and deleted before.
		// Its table-less messages were never in the table: the log is
		// their only copy.
		kept := b.items[:0]
		for _, it := range b.items {
			if it.seq == 0 {
				kept = append(kept, it)
			}
		}
		clear(b.items[len(kept):])
		b.items = kept
	}
	b.t.left = len(b.items)
	rd.prog.handed.Add(1)
	for {
		select {
		case rd.out <- *b:
			return nil
		case <-tick.C:
			if err := rd.status(ctx, false); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// decode turns an inserted courier_outbox row into an item.
func (rd *reader) decode(rel *pglogrepl.RelationMessage, tuple *pglogrepl.TupleData) (*item, error) {
	it := &item{}
	var id uuid.UUID
	var version int32
	for i, col := range tuple.Columns {
		if i >= len(rel.Columns) {
			break
		}
		c := rel.Columns[i]
		if col.DataType == pglogrepl.TupleDataTypeNull {
			continue
		}
		format := int16(pgtype.TextFormatCode)
		if col.DataType == pglogrepl.TupleDataTypeBinary {
			format = pgtype.BinaryFormatCode
		}
		var dst any
		switch c.Name {
		case "id":
			dst = &it.seq
		case "message_id":
			dst = &id
		case "topic":
			dst = &it.msg.Topic
		case "ordering_key":
			dst = &it.msg.Key
		case "type":
			dst = &it.msg.Type
		case "version":
			dst = &version
		case "content_type":
			dst = &it.msg.ContentType
		case "payload":
			dst = &it.msg.Payload
		case "headers":
			dst = &it.msg.Headers
		case "occurred_at":
			dst = &it.msg.OccurredAt
		default:
			continue
		}
		if err := rd.types.Scan(c.DataType, format, col.Data, dst); err != nil {
			return nil, fmt.Errorf("cdc: decode courier_outbox.%s: %w", c.Name, err)
		}
	}
	it.msg.ID, it.msg.Version = id, int(version)
	it.msg.OccurredAt = it.msg.OccurredAt.UTC()
	if it.seq == 0 {
		return nil, errors.New("cdc: an inserted courier_outbox row without an id")
	}
	if it.msg.Payload == nil {
		it.msg.Payload = []byte{}
	}
	return it, nil
}

// advance raises v to lsn if lsn is higher.
func advance(v *atomic.Uint64, lsn uint64) {
	for {
		cur := v.Load()
		if lsn <= cur || v.CompareAndSwap(cur, lsn) {
			return
		}
	}
}

// begin opens the transaction the table's rows are read in and learns,
// before the slot is read, which transactions the log still holds up to
// that snapshot. It peeks at the slot's changes (decoding without
// consuming them) up to the log's end at the snapshot: every transaction
// the snapshot sees and the log still holds is among them. Their rows are
// left to the log, which brings them in commit order together with their
// table-less messages; the rows the sweep publishes are older than
// anything the log holds. The slot must not be read meanwhile.
func (r *Relay) begin(ctx context.Context) (pgx.Tx, *snapshot, error) {
	tx, err := r.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, nil, fmt.Errorf("cdc: read the outbox: %w", err)
	}
	fail := func(err error) (pgx.Tx, *snapshot, error) {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return nil, nil, err
	}
	var text string
	var end pglogrepl.LSN
	// The snapshot is taken at the first statement; pg_current_wal_insert_lsn,
	// evaluated after it, is past every commit it sees.
	if err := tx.QueryRow(ctx, "SELECT pg_current_snapshot()::text, pg_current_wal_insert_lsn()::text").Scan(&text, &end); err != nil {
		return fail(fmt.Errorf("cdc: read the outbox: %w", err))
	}
	snap, err := parseSnapshot(text)
	if err != nil {
		return fail(err)
	}
	// Decoding through SQL reads only flushed log.
	for {
		var flushed pglogrepl.LSN
		if err := r.pool.QueryRow(ctx, "SELECT pg_current_wal_flush_lsn()::text").Scan(&flushed); err != nil {
			return fail(fmt.Errorf("cdc: read the log's position: %w", err))
		}
		if flushed >= end {
			break
		}
		if !waits.Sleep(ctx, 10*time.Millisecond) {
			return fail(ctx.Err())
		}
	}
	rows, err := r.pool.Query(ctx, `SELECT DISTINCT xid::text::bigint FROM pg_logical_slot_peek_binary_changes($1, $2::text::pg_lsn, NULL,
    'proto_version', '1', 'publication_names', $3, 'messages', 'true') WHERE xid IS NOT NULL`, r.cfg.Slot, end.String(), r.cfg.Publication)
	if err != nil {
		return fail(r.slotError(fmt.Errorf("cdc: look at the slot's backlog: %w", err)))
	}
	xids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil && r.slotLost(ctx) {
		return fail(r.dropLost(ctx, err))
	}
	if err != nil {
		return fail(r.slotError(fmt.Errorf("cdc: look at the slot's backlog: %w", err)))
	}
	snap.logged = make(map[uint32]bool, len(xids))
	for _, x := range xids {
		snap.logged[uint32(x)] = true
	}
	return tx, snap, nil
}

// slotError makes err errSlotBusy when another connection reads the slot.
func (r *Relay) slotError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55006" {
		return fmt.Errorf("%w: %s", errSlotBusy, pgErr.Message)
	}
	return err
}

// sweep hands the rows already in the table to out, oldest first, a page
// at a time, all read in tx (begin's), leaving out the rows of the
// transactions the log still holds. It ends tx.
func (r *Relay) sweep(ctx context.Context, tx pgx.Tx, snap *snapshot, out chan<- batch) error {
	defer tx.Rollback(context.WithoutCancel(ctx))
	after := int64(0)
	for {
		rows, err := tx.Query(ctx, sweepPageSQL, after, r.cfg.BatchSize)
		if err != nil {
			return fmt.Errorf("cdc: read the outbox: %w", err)
		}
		var ids []int64
		n := 0
		for rows.Next() {
			var id, xmin int64
			if err := rows.Scan(&id, &xmin); err != nil {
				rows.Close()
				return fmt.Errorf("cdc: read the outbox: %w", err)
			}
			n++
			after = id
			if !snap.logged[uint32(xmin)] { // else the log brings it
				ids = append(ids, id)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("cdc: read the outbox: %w", err)
		}
		if len(ids) > 0 {
			page, err := r.sweepRows(ctx, tx, ids)
			if err != nil {
				return err
			}
			snap.rows += len(page)
			select {
			case out <- batch{items: page}:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if n < r.cfg.BatchSize {
			return nil
		}
	}
}

// sweepRows reads the rows of ids in tx, oldest first.
func (r *Relay) sweepRows(ctx context.Context, tx pgx.Tx, ids []int64) ([]*item, error) {
	rows, err := tx.Query(ctx, sweepRowsSQL, ids)
	if err != nil {
		return nil, fmt.Errorf("cdc: read the outbox: %w", err)
	}
	defer rows.Close()
	page := make([]*item, 0, len(ids))
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

// snapshot is a PostgreSQL snapshot (pg_current_snapshot): which
// transactions' effects it sees.
type snapshot struct {
	xmin, xmax uint64
	xip        map[uint64]bool
	logged     map[uint32]bool // transactions the slot held up to it
	rows       int             // rows swept in it
}

// parseSnapshot reads pg_snapshot's text form, xmin:xmax:xip,….
func parseSnapshot(text string) (*snapshot, error) {
	parts := strings.Split(text, ":")
	if len(parts) != 3 {
		return nil, fmt.Errorf("cdc: a snapshot %q: want xmin:xmax:xip", text)
	}
	s := &snapshot{xip: map[uint64]bool{}}
	var err error
	if s.xmin, err = strconv.ParseUint(parts[0], 10, 64); err != nil {
		return nil, fmt.Errorf("cdc: snapshot %q: %w", text, err)
	}
	if s.xmax, err = strconv.ParseUint(parts[1], 10, 64); err != nil {
		return nil, fmt.Errorf("cdc: snapshot %q: %w", text, err)
	}
	for _, x := range strings.Split(parts[2], ",") {
		if x == "" {
			continue
		}
		v, err := strconv.ParseUint(x, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("cdc: snapshot %q: %w", text, err)
		}
		s.xip[v] = true
	}
	return s, nil
}

// sees reports whether the committed transaction xid (32 bits, as the log
// gives it) was visible in s. The log brings transactions from about the
// snapshot's time, so xid is placed in the epoch nearest to xmax.
func (s *snapshot) sees(xid uint32) bool {
	full := s.xmax&^0xFFFFFFFF | uint64(xid)
	if full > s.xmax+(1<<31) && full >= 1<<32 {
		full -= 1 << 32
	} else if full+(1<<31) < s.xmax {
		full += 1 << 32
	}
	switch {
	case full < s.xmin:
		return true
	case full >= s.xmax:
		return false
	}
	return !s.xip[full]
}
