package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
)

// logPrefix begins the prefix of the logical decoding messages LogOnly
// writes: logPrefix and the OID of the courier_outbox table the
// statement's search_path finds (logTableSQL), such as
// "courier_outbox:16403". The log is the whole database's, so the prefix
// keeps apart the outboxes of several schemas (each courier_outbox has its
// own OID); the CDC relay (relay/cdc) reads the messages of its own.
const logPrefix = "courier_outbox:"

// logTableSQL is the expression for the rest of the prefix: the OID of
// courier_outbox as the statement's search_path resolves it. The OID, not
// the schema's name: resolving the table's name to its OID (regclass input)
// is a syscache lookup, while the schema's name took a subquery on
// pg_class in each statement, ~8% of the write path's transactions per
// second. The name is cast from text so that it is resolved when the
// statement runs, not when it is prepared: when there is no courier_outbox
// table, it fails (undefined_table) as the statement's error, which
// LogOnly and QueueLogMessages turn into one that says to migrate (a
// failed prepare would fail a pgx.Batch before its callbacks run), and it
// follows the search_path of the moment. The OID is the table's for its
// lifetime: a table dropped and created again has another, so the
// table-less messages still in the slot then are not read by a relay
// started afterwards.
const logTableSQL = `'courier_outbox'::text::regclass::oid`

// logFormat is the first byte of a message's content: the version of its
// encoding (see encodeLogMessage), 1 and one more for each column
// columns.Message holds beyond format 1's (logColumns).
var logFormat = byte(1 + len(columns.Message) - len(logColumns) - 1)

// logColumns are the columns of format 1, in its order but for the
// payload, which ends every format.
var logColumns = []string{"message_id", "occurred_at", "version", "topic", "ordering_key", "type", "content_type", "headers"}

// logOrder holds the columns of a message's encoding by format: those of
// logOrder[f] are format f's, in order, the payload left out. Format 1's
// are logColumns, the first columns of columns.Message with the payload;
// each later format adds the next column of columns.Message.
var logOrder = func() [][]columns.Column {
	first := len(logColumns) + 1
	base := make([]columns.Column, len(logColumns))
	for i, name := range logColumns {
		c, ok := columns.ByName(name)
		if !ok || !slices.ContainsFunc(columns.Message[:first], func(m columns.Column) bool { return m.Name == name }) {
			panic("postgres: format 1 of the log holds column " + name + ", which is not among the first columns of columns.Message: put it back there")
		}
		base[i] = c
	}
	order := [][]columns.Column{nil, base}
	for i := range columns.Message[first:] {
		order = append(order, append(slices.Clip(base), columns.Message[first:first+i+1]...))
	}
	return order
}()

// logCheck is the statements' check that something can read the log. A
// session that ran it within a minute does not run it again: the setting
// courier.log_checked holds until when it is trusted ($3, epoch seconds
// written with 12 digits, set in the writer's transaction, so it is kept
// only when that commits), and $2 is the writer's clock in the same form.
// When it runs, it gives the wal_level and whether the database has a
// logical replication slot, as query_to_xml writes a row (see logResult);
// NULL when it does not run. The slots are looked up through query_to_xml,
// which runs its query only when the CASE reaches it: a subquery would be
// an init plan that PostgreSQL starts (locking pg_database) at every
// execution even when it does not run it, and every expression the
// statement holds is set up at every execution, so the cached path is kept
// to a comparison. Together that cost writers about 5% of their
// transactions a second.
const logCheck = `CASE WHEN current_setting('courier.log_checked', true) COLLATE "C" > $2 THEN NULL
     ELSE query_to_xml('SELECT current_setting(''wal_level'') AS level, EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots WHERE slot_type = ''logical'' AND NOT temporary AND database = current_database()) AS slot',
                       false, true, '')::text || set_config('courier.log_checked', $3, false)
END`

// logCheckedFor is how long a session trusts a passed check.
const logCheckedFor = time.Minute

// logCheckArgs returns logCheck's arguments for now.
func logCheckArgs(now time.Time) (string, string) {
	return fmt.Sprintf("%012d", now.Unix()), fmt.Sprintf("%012d", now.Add(logCheckedFor).Unix())
}

// The statements LogOnly and QueueLogMessages run: the messages and the
// check (logCheck). Without wal_level logical or a logical slot, the
// messages would be written where nothing can ever read them, so the
// write fails and the caller's transaction rolls back.
const (
	logOne  = `SELECT pg_logical_emit_message(true, '` + logPrefix + `' || ` + logTableSQL + `, $1::bytea) IS NOT NULL, ` + logCheck
	logMany = `SELECT count(pg_logical_emit_message(true, '` + logPrefix + `' || ` + logTableSQL + `, m)) > 0, ` + logCheck + `
FROM unnest($1::bytea[]) AS m`
)

// ErrNoLogicalSlot is returned by LogOnly's Insert and by the statement
// QueueLogMessages queues when the database has no logical replication slot
// (or wal_level is not logical): a message written only to the log would be
// read by nobody. Start the CDC relay once (it makes its slot) before
// writing table-less messages.
var ErrNoLogicalSlot = errors.New("postgres: no logical replication slot reads this database's log")

// LogOnly returns an outbox inserter for pgx transactions that writes each
// message only to the write-ahead log, as a transactional logical decoding
// message (pg_logical_emit_message(true, logPrefix || logTableSQL, …)) in
// the caller's transaction, and no row in courier_outbox (the table must
// exist all the same: the prefix names it by its OID, and dead letters and
// replays use it). Pass it to outbox.New:
//
//	w := outbox.New(postgres.LogOnly(), outbox.Config{})
//
// QueueLogMessages writes the same messages in the round trip of the
// caller's own statements.
//
// Only the CDC relay (relay/cdc) publishes these messages; it reads them in
// commit order with the table's rows, so a key's messages keep commit order
// whichever inserter wrote them. The trade-off: with no row there is no
// polling fallback. The replication slot is the only copy until the relay
// has published a message: a slot that is dropped, or lost because it fell
// behind max_slot_wal_keep_size, loses the table-less messages it had not
// confirmed yet. Insert fails with ErrNoLogicalSlot when the database has
// no logical slot at all (or wal_level is not logical), but it cannot tell
// whether the relay's slot is the one that exists. That check runs at most
// once a minute per database session: a session whose check passed, in a
// transaction that committed, trusts it for 60 seconds (its setting
// courier.log_checked holds until when, by the writer's clock), so a slot
// dropped meanwhile is noticed by each session within a minute, and the first write of a
// session (or the first after a minute) fails at once when there is no
// slot. Use LogOnly where the write path's cost matters more than that
// fallback, and keep the slot safe (no max_slot_wal_keep_size below the
// backlog an outage builds).
//
// It is also a store.Scheduler, which schedules messages as rows, exactly
// as Pgx does: a message that waits for days cannot wait in the slot
// without making PostgreSQL keep days of WAL, so a scheduled message waits
// in courier_outbox_scheduled whichever inserter wrote it, and is released
// into courier_outbox as a row (published from the log by the CDC relay,
// and by the polling relay as its fallback).
func LogOnly() store.Inserter[pgx.Tx] { return logInserter{} }

// logInserter writes messages to the log, and schedules them as rows.
type logInserter struct{ pgxScheduler }

func (logInserter) Insert(ctx context.Context, tx pgx.Tx, msgs []courier.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	q, args := logStatement(msgs)
	return logResult(tx.QueryRow(ctx, q, args...), len(msgs))
}

// QueueLogMessages is the table-less twin of QueueMessages: it validates
// msgs against limits (zero fields: Courier's defaults) and queues into b
// one statement that writes them only to the log, as LogOnly does, so that
// the caller's change and its messages travel to the database in one round
// trip:
//
//	var b pgx.Batch
//	b.Queue("INSERT INTO orders (id, total) VALUES ($1, $2)", id, total)
//	if err := postgres.QueueLogMessages(&b, courier.Limits{}, msg); err != nil { … }
//	if err := tx.SendBatch(ctx, &b).Close(); err != nil { … }
//	return tx.Commit(ctx)
//
// Everything LogOnly's documentation says holds: only the CDC relay
// publishes them, there is no polling fallback, and the statement fails,
// as the batch's error, with ErrNoLogicalSlot when nothing could read the
// log, or with the undefined-table error when the search_path finds no
// courier_outbox; the caller's transaction must then roll back. Nothing is
// queued when a message is invalid or msgs is empty.
func QueueLogMessages(b *pgx.Batch, limits courier.Limits, msgs ...courier.Message) error {
	if err := validate(limits, msgs); err != nil || len(msgs) == 0 {
		return err
	}
	q, args := logStatement(msgs)
	n := len(msgs)
	b.Queue(q, args...).QueryRow(func(row pgx.Row) error { return logResult(row, n) })
	return nil
}

// logStatement returns the statement writing msgs (at least one) to the log
// and its arguments.
func logStatement(msgs []courier.Message) (string, []any) {
	now, until := logCheckArgs(time.Now())
	if len(msgs) == 1 {
		return logOne, []any{encodeLogMessage(nil, &msgs[0]), now, until}
	}
	contents := make([][]byte, len(msgs))
	for i := range msgs {
		contents[i] = encodeLogMessage(nil, &msgs[i])
	}
	return logMany, []any{contents, now, until}
}

// logResult reads the result of logStatement's statement for n messages.
func logResult(row pgx.Row, n int) error {
	var (
		written bool
		check   *string // logCheck's row, as query_to_xml writes it
	)
	if err := row.Scan(&written, &check); err != nil {
		return migrations.InsertError(err, n, errorCode(err) == undefinedTable)
	}
	if check == nil {
		return nil // trusted from an earlier check
	}
	level := between(*check, "<level>", "</level>")
	switch {
	case level != "logical":
		return fmt.Errorf("%w: wal_level is %s; set it to logical (ALTER SYSTEM SET wal_level = logical, then restart PostgreSQL)", ErrNoLogicalSlot, level)
	case !strings.Contains(*check, "<slot>true</slot>"):
		return fmt.Errorf("%w: start the CDC relay (courier relay --mode cdc) once so that it makes its slot, then write", ErrNoLogicalSlot)
	}
	return nil
}

// between returns what s holds between the first start and the end after
// it, "" when it holds neither.
func between(s, start, end string) string {
	_, after, ok := strings.Cut(s, start)
	if !ok {
		return ""
	}
	in, _, _ := strings.Cut(after, end)
	return in
}

// encodeLogMessage appends m's encoding, as LogOnly writes it, to b: the
// version of the format (logFormat), then the columns of logOrder (format
// 1: the 16 bytes of the id, the time it occurred as Unix microseconds, a
// zig-zag varint, the schema version as a varint, topic, key, type and
// content type each as a varint length and its bytes, the number of
// headers and each header's name and value, sorted by name; then the
// columns added since, in columns.Message's order), then the payload to
// the end.
func encodeLogMessage(b []byte, m *courier.Message) []byte {
	size := 1 + 16 + 10 + 5 + len(m.Topic) + len(m.Key) + len(m.Type) + len(m.ContentType) + 20 + len(m.Payload)
	for k, v := range m.Headers {
		size += len(k) + len(v) + 4
	}
	b = slices.Grow(b, size)
	b = append(b, logFormat)
	for _, c := range logOrder[logFormat] {
		b = columns.AppendLog(b, c, m)
	}
	return append(b, m.Payload...)
}

// decodeLogMessage reads a message that encodeLogMessage wrote, in its
// format or an earlier one (whose later columns it leaves zero). It fails
// on a later format or a truncated or malformed encoding, naming what is
// wrong.
func decodeLogMessage(b []byte) (courier.Message, error) {
	var m courier.Message
	if len(b) == 0 || b[0] == 0 || b[0] > logFormat {
		v := -1
		if len(b) > 0 {
			v = int(b[0])
		}
		return m, fmt.Errorf("postgres: a %s log message of format %d: this version reads formats 1 to %d (upgrade the relay)", logPrefix, v, logFormat)
	}
	rest := b[1:]
	for _, c := range logOrder[b[0]] {
		var ok bool
		if rest, ok = columns.ReadLog(rest, c, &m); !ok {
			return m, fmt.Errorf("postgres: a %s log message with a truncated or malformed %s", logPrefix, c.Name)
		}
	}
	m.Payload = append([]byte{}, rest...)
	return m, nil
}
