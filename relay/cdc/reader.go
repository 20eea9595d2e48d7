package cdc

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/courier-go/courier/store"
)

// confirmEvery is how soon the relay tells PostgreSQL a position it has
// confirmed: a relay that dies publishes again what it had not confirmed,
// so that is what a kill costs, besides the recorder's delay (recordEvery).
const confirmEvery = 20 * time.Millisecond

// batch is what the reader and the sweep hand the publisher: a committed
// transaction's messages (t set), or a page of rows read from the table (t
// nil; last marks the sweep's final page).
type batch struct {
	items []*item
	t     *txn
	last  bool
}

// progress is shared by the reader and the publisher.
type progress struct {
	confirmed atomic.Uint64 // the position every transaction before which is done
	handed    atomic.Int64  // transactions handed to the publisher
	done      atomic.Int64  // transactions the publisher finished
}

// reader owns the replication connection.
type reader struct {
	r        *Relay
	conn     *pgconn.PgConn
	slot     string // the slot it reads: the relay's, or the temporary one that makes it
	prog     *progress
	out      chan<- batch
	decoder  store.LogDecoder
	cur      *batch // the transaction being received
	received uint64 // the end of what the server sent so far
	lastSent time.Time
	sentPos  uint64 // the position last confirmed to the server

	// While the slot is made: read is closed once the table's rows are
	// handed over (the log's transactions wait until then), recorded once
	// they are all recorded (the slot can be made).
	read, recorded <-chan struct{}
}

// run reads the stream until ctx ends or the connection fails, handing
// committed transactions to out and confirming prog.confirmed. While the
// slot is made, it returns errMade once it is.
func (rd *reader) run(ctx context.Context) error {
	for {
		if err := rd.confirm(ctx, false); err != nil {
			return err
		}
		if rd.recorded != nil && rd.cur == nil && closed(rd.recorded) {
			return rd.makeSlot(ctx)
		}
		rctx, cancel := context.WithTimeout(ctx, rd.nextConfirm().Sub(rd.now()))
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

// now is the relay's clock.
func (rd *reader) now() time.Time { return rd.r.cfg.Clock.Now() }

// closed reports whether c is closed.
func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// busy reports whether transactions handed over are not yet done, or done
// and not yet confirmed to the server.
func (rd *reader) busy() bool {
	return rd.prog.handed.Load() != rd.prog.done.Load() || rd.prog.confirmed.Load() > rd.sentPos
}

// nextConfirm is when to look again at the confirmed position: soon while
// work is under way (or the table's rows are being recorded), else when
// the status interval is up.
func (rd *reader) nextConfirm() time.Time {
	if rd.busy() || rd.recorded != nil {
		return rd.now().Add(confirmEvery)
	}
	return rd.lastSent.Add(rd.r.cfg.StatusInterval)
}

// confirm tells the server the confirmed position when it moved (at most
// every confirmEvery), when the status interval is up, or when forced.
func (rd *reader) confirm(ctx context.Context, force bool) error {
	since := rd.now().Sub(rd.lastSent)
	moved := rd.prog.confirmed.Load() > rd.sentPos
	if force || (moved && since >= confirmEvery) || since >= rd.r.cfg.StatusInterval {
		return rd.status(ctx)
	}
	return nil
}

// status tells the server the confirmed position: written, flushed and
// applied are all the position before which every transaction is done,
// never merely what was received.
func (rd *reader) status(ctx context.Context) error {
	pos := rd.prog.confirmed.Load()
	rd.lastSent = rd.now()
	if pos == 0 {
		return nil // nothing confirmed yet: the slot keeps its own position
	}
	err := pglogrepl.SendStandbyStatusUpdate(ctx, rd.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pglogrepl.LSN(pos), WALFlushPosition: pglogrepl.LSN(pos), WALApplyPosition: pglogrepl.LSN(pos),
	})
	if err != nil {
		return fmt.Errorf("cdc: confirm position %s: %w", pglogrepl.LSN(pos), err)
	}
	rd.sentPos = pos
	if rd.slot == rd.r.cfg.Slot {
		rd.r.m.setConfirmed(pos)
	}
	return nil
}

// makeWait is how long the session that makes the slot waits for what it
// handed over to be done before it makes the slot: what is not done then
// is published again by the next session (duplicates), rather than held
// up by an outage or a message waiting for its retry.
const makeWait = 5 * time.Second

// makeSlot ends the session that makes the slot: every row from the table
// is recorded. It stops reading, waits (up to makeWait) until what it
// handed over is done, confirms that position and copies the temporary
// slot to the relay's.
func (rd *reader) makeSlot(ctx context.Context) error {
	tick := time.NewTicker(confirmEvery)
	defer tick.Stop()
	deadline := rd.now().Add(makeWait)
	for rd.prog.handed.Load() != rd.prog.done.Load() && rd.now().Before(deadline) {
		select {
		case <-tick.C:
			if err := rd.confirm(ctx, false); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := rd.confirm(ctx, true); err != nil {
		return err
	}
	return rd.r.copySlot(ctx, rd.slot, rd.sentPos)
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
	buf = binary.BigEndian.AppendUint64(buf, uint64(rd.now().Sub(pgEpoch).Microseconds()))
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
		// slot may move to the end of what was sent: what lies before it
		// is other tables' changes.
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
		ev, err := rd.decoder.Decode(xld.WALData)
		if err != nil {
			return fmt.Errorf("cdc: at %s: %w", xld.WALStart, err)
		}
		return rd.event(ctx, ev)
	}
	return nil
}

// event handles one decoded message of the log.
func (rd *reader) event(ctx context.Context, ev store.LogEvent) error {
	switch ev.Kind {
	case store.LogBegin:
		rd.cur = &batch{t: &txn{xid: ev.Xid}}
	case store.LogMessage:
		it := &item{LogItem: ev.Item, txn: rd.cur.t}
		it.Xid = rd.cur.t.xid
		rd.cur.items = append(rd.cur.items, it)
	case store.LogScheduled:
		rd.r.due.Poke() // a due time the relay may not know; released when due
	case store.LogCommit:
		b := rd.cur
		rd.cur = nil
		if b == nil {
			return nil
		}
		b.t.end = ev.End
		return rd.hand(ctx, b)
	}
	return nil
}

// hand gives a committed transaction to the publisher, after the table's
// rows while the slot is made; it confirms the position meanwhile should
// that take a while.
func (rd *reader) hand(ctx context.Context, b *batch) error {
	tick := time.NewTicker(confirmEvery)
	defer tick.Stop()
	for rd.read != nil && !closed(rd.read) {
		select {
		case <-rd.read:
		case <-tick.C:
			if err := rd.confirm(ctx, false); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	b.t.left = len(b.items)
	rd.prog.handed.Add(1)
	for {
		select {
		case rd.out <- *b:
			return nil
		case <-tick.C:
			if err := rd.confirm(ctx, false); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
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
