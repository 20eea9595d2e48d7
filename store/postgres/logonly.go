package postgres

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
)

// LogPrefix begins the prefix of the logical decoding messages LogOnly
// writes: LogPrefix and the schema of the courier_outbox table the
// transaction's search_path finds (LogSchemaSQL), "courier_outbox:public"
// for most. The log is the whole database's, so the schema keeps apart the
// outboxes of several schemas; the CDC relay (relay/cdc) reads the messages
// of its own.
const LogPrefix = "courier_outbox:"

// LogSchemaSQL is the expression for the schema part of the prefix: the
// schema of courier_outbox as the session's search_path resolves it. It
// fails (undefined_table) when there is no courier_outbox table.
const LogSchemaSQL = `(SELECT relnamespace::regnamespace::text FROM pg_class WHERE oid = 'courier_outbox'::regclass)`

// logFormat is the first byte of a message's content: the version of its
// encoding (see EncodeLogMessage).
const logFormat byte = 1

// The statements LogOnly runs. Each also reports wal_level and whether the
// database has a logical replication slot: without either, the messages
// would be written where nothing can ever read them, so Insert fails and
// the caller's transaction rolls back.
const (
	logOne = `SELECT pg_logical_emit_message(true, $1 || ` + LogSchemaSQL + `, $2::bytea) IS NOT NULL, current_setting('wal_level'),
       EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_type = 'logical' AND database = current_database())`
	logMany = `SELECT count(pg_logical_emit_message(true, $1 || ` + LogSchemaSQL + `, m)) > 0, current_setting('wal_level'),
       EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_type = 'logical' AND database = current_database())
FROM unnest($2::bytea[]) AS m`
)

// ErrNoLogicalSlot is returned by LogOnly's Insert when the database has no
// logical replication slot (or wal_level is not logical): a message written
// only to the log would be read by nobody. Start the CDC relay once (it
// makes its slot) before writing table-less messages.
var ErrNoLogicalSlot = errors.New("postgres: no logical replication slot reads this database's log")

// LogOnly returns an outbox inserter for pgx transactions that writes each
// message only to the write-ahead log, as a transactional logical decoding
// message (pg_logical_emit_message(true, LogPrefix, …)) in the caller's
// transaction, and no row in courier_outbox (the table must exist all the
// same: the prefix names its schema, and dead letters and replays use it).
// Pass it to outbox.New:
//
//	w := outbox.New(postgres.LogOnly(), outbox.Config{})
//
// Only the CDC relay (relay/cdc) publishes these messages; it reads them in
// commit order with the table's rows, so a key's messages keep commit order
// whichever inserter wrote them. The trade-off: with no row there is no
// polling fallback. The replication slot is the only copy until the relay
// has published a message: a slot that is dropped, or lost because it fell
// behind max_slot_wal_keep_size, loses the table-less messages it had not
// confirmed yet. Insert fails with ErrNoLogicalSlot when the database has
// no logical slot at all (or wal_level is not logical), but it cannot tell
// whether the relay's slot is the one that exists. Use LogOnly where the
// write path's cost matters more than that fallback, and keep the slot
// safe (no max_slot_wal_keep_size below the backlog an outage builds).
func LogOnly() store.Inserter[pgx.Tx] { return logInserter{} }

type logInserter struct{}

func (logInserter) Insert(ctx context.Context, tx pgx.Tx, msgs []courier.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	var row pgx.Row
	if len(msgs) == 1 {
		row = tx.QueryRow(ctx, logOne, LogPrefix, EncodeLogMessage(nil, &msgs[0]))
	} else {
		contents := make([][]byte, len(msgs))
		for i := range msgs {
			contents[i] = EncodeLogMessage(nil, &msgs[i])
		}
		row = tx.QueryRow(ctx, logMany, LogPrefix, contents)
	}
	var (
		written bool
		level   string
		slot    bool
	)
	if err := row.Scan(&written, &level, &slot); err != nil {
		return migrations.InsertError(err, len(msgs), errorCode(err) == undefinedTable)
	}
	switch {
	case level != "logical":
		return fmt.Errorf("%w: wal_level is %s; set it to logical (ALTER SYSTEM SET wal_level = logical, then restart PostgreSQL)", ErrNoLogicalSlot, level)
	case !slot:
		return fmt.Errorf("%w: start the CDC relay (courier relay --mode cdc) once so that it makes its slot, then write", ErrNoLogicalSlot)
	}
	return nil
}

// EncodeLogMessage appends m's encoding, as LogOnly writes it, to b: a
// version byte (1), the 16 bytes of the id, the time it occurred (Unix
// microseconds, zig-zag varint), the schema version (varint), topic, key,
// type and content type (each a varint length and its bytes), the number of
// headers and each header's name and value (sorted by name), then the
// payload to the end.
func EncodeLogMessage(b []byte, m *courier.Message) []byte {
	size := 1 + 16 + 10 + 5 + len(m.Topic) + len(m.Key) + len(m.Type) + len(m.ContentType) + 20 + len(m.Payload)
	for k, v := range m.Headers {
		size += len(k) + len(v) + 4
	}
	b = slices.Grow(b, size)
	b = append(b, logFormat)
	b = append(b, m.ID[:]...)
	b = binary.AppendVarint(b, m.OccurredAt.UnixMicro())
	b = binary.AppendUvarint(b, uint64(m.Version))
	for _, s := range []string{m.Topic, m.Key, m.Type, m.ContentType} {
		b = appendString(b, s)
	}
	names := make([]string, 0, len(m.Headers))
	for k := range m.Headers {
		names = append(names, k)
	}
	slices.Sort(names)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, k := range names {
		b = appendString(appendString(b, k), m.Headers[k])
	}
	return append(b, m.Payload...)
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// DecodeLogMessage reads a message that EncodeLogMessage wrote. It fails on
// an unknown version byte or a truncated or malformed encoding, naming
// what is wrong.
func DecodeLogMessage(b []byte) (courier.Message, error) {
	var m courier.Message
	d := logDecoder{b: b}
	if len(b) == 0 || b[0] != logFormat {
		v := -1
		if len(b) > 0 {
			v = int(b[0])
		}
		return m, fmt.Errorf("postgres: a %s log message of format %d: this version reads format %d (upgrade the relay)", LogPrefix, v, logFormat)
	}
	d.b = d.b[1:]
	if len(d.b) < 16 {
		return m, d.fail("id")
	}
	m.ID = uuid.UUID(d.b[:16])
	d.b = d.b[16:]
	micros, n := binary.Varint(d.b)
	if n <= 0 {
		return m, d.fail("occurred_at")
	}
	d.b = d.b[n:]
	m.OccurredAt = time.UnixMicro(micros).UTC()
	version, n := binary.Uvarint(d.b)
	if n <= 0 || version > 1<<31-1 {
		return m, d.fail("version")
	}
	d.b = d.b[n:]
	m.Version = int(version)
	for _, f := range []struct {
		dst  *string
		name string
	}{{&m.Topic, "topic"}, {&m.Key, "key"}, {&m.Type, "type"}, {&m.ContentType, "content type"}} {
		if *f.dst, d.ok = d.string(); !d.ok {
			return m, d.fail(f.name)
		}
	}
	count, n := binary.Uvarint(d.b)
	if n <= 0 || count > uint64(len(d.b)) {
		return m, d.fail("header count")
	}
	d.b = d.b[n:]
	if count > 0 {
		m.Headers = make(map[string]string, count)
	}
	for range count {
		k, ok := d.string()
		if !ok {
			return m, d.fail("header name")
		}
		v, ok := d.string()
		if !ok {
			return m, d.fail("header value")
		}
		m.Headers[k] = v
	}
	m.Payload = append([]byte{}, d.b...)
	return m, nil
}

// logDecoder reads an encoding from the front of b.
type logDecoder struct {
	b  []byte
	ok bool
}

func (d *logDecoder) string() (string, bool) {
	n, k := binary.Uvarint(d.b)
	if k <= 0 || n > uint64(len(d.b)-k) {
		return "", false
	}
	s := string(d.b[k : k+int(n)])
	d.b = d.b[k+int(n):]
	return s, utf8.ValidString(s)
}

func (d *logDecoder) fail(field string) error {
	return fmt.Errorf("postgres: a %s log message with a truncated or malformed %s", LogPrefix, field)
}
