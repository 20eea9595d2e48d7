package cdc

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Statements on courier_outbox once the broker has answered. They take ids
// only: the rows are still in the table, since nothing deletes a pending
// row but a relay that published it.
const (
	deleteSQL  = `DELETE FROM courier_outbox WHERE id = ANY($1) RETURNING id`
	archiveSQL = `WITH published AS (
    DELETE FROM courier_outbox WHERE id = ANY($1)
    RETURNING id, message_id, topic, ordering_key, type, version, content_type, payload, headers,
              occurred_at, created_at, attempts)
INSERT INTO courier_outbox_published
    (id, message_id, topic, ordering_key, type, version, content_type, payload, headers, occurred_at, created_at, attempts)
SELECT * FROM published
RETURNING id`
	deadSQL = `WITH f AS (
    SELECT * FROM unnest($1::bigint[], $2::int[], $3::text[], $4::jsonb[]) AS f(id, attempts, err, history)
), dead AS (
    DELETE FROM courier_outbox o USING f WHERE o.id = f.id
    RETURNING o.id, o.message_id, o.topic, o.ordering_key, o.type, o.version, o.content_type, o.payload, o.headers,
              o.occurred_at, o.created_at, f.attempts, f.err, f.history
)
INSERT INTO courier_outbox_dead_letters
    (id, message_id, topic, ordering_key, type, version, content_type, payload, headers,
     occurred_at, created_at, attempts, last_error, history)
SELECT * FROM dead
ON CONFLICT DO NOTHING
RETURNING id`
	// deadLogSQL makes table-less messages (written with
	// postgres.LogOnly) dead letters, with ids from courier_outbox's
	// sequence, so that replaying one puts it in the table like any other.
	deadLogSQL = `INSERT INTO courier_outbox_dead_letters
    (id, message_id, topic, ordering_key, type, version, content_type, payload, headers,
     occurred_at, created_at, attempts, last_error, history)
SELECT nextval(pg_get_serial_sequence('courier_outbox', 'id')), f.*
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::int[], $6::text[], $7::bytea[], $8::jsonb[],
            $9::timestamptz[], $10::timestamptz[], $11::int[], $12::text[], $13::jsonb[])
     AS f(message_id, topic, ordering_key, type, version, content_type, payload, headers, occurred_at, created_at, attempts, err, history)
ON CONFLICT (message_id) DO NOTHING`
	// archiveLogSQL keeps published table-less messages in
	// courier_outbox_published (KeepPublished), with ids from
	// courier_outbox's sequence like the table's rows.
	archiveLogSQL = `INSERT INTO courier_outbox_published
    (id, message_id, topic, ordering_key, type, version, content_type, payload, headers, occurred_at, created_at, attempts)
SELECT nextval(pg_get_serial_sequence('courier_outbox', 'id')), f.*
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::int[], $6::text[], $7::bytea[], $8::jsonb[],
            $9::timestamptz[], $10::timestamptz[], $11::int[])
     AS f(message_id, topic, ordering_key, type, version, content_type, payload, headers, occurred_at, created_at, attempts)`
	// sweepSQL reads a page of the table's rows, oldest first.
	sweepSQL = `SELECT id, message_id, topic, ordering_key, type, version, content_type, payload, headers, occurred_at
FROM courier_outbox WHERE id > $1 ORDER BY id LIMIT $2`
	// snapshotSQL runs before the statements that record: a transaction
	// it sees is seen by them too, so a row of it that they do not find
	// is gone.
	snapshotSQL = `SELECT pg_current_snapshot()::text`
)

// historyCap is the most failures a dead letter's history keeps, as with the
// polling relay.
const historyCap = 20

// finish records what the broker said of published and dead in one
// transaction: published rows deleted (or archived), dead ones moved to the
// dead letters. It returns the items whose rows it did not find, with a
// snapshot taken before it looked: the log can bring a commit a moment
// before the transaction is visible to other sessions, so the caller tries
// again those of transactions the snapshot does not see yet; a row of a
// transaction it sees is gone (another relay published it, or this one
// before it died). Items without a row are done.
func (r *Relay) finish(ctx context.Context, published, dead []*item) (missing []*item, snap *snapshot, err error) {
	var ids []int64
	for _, it := range published {
		if it.seq > 0 {
			ids = append(ids, it.seq)
		}
	}
	var (
		deadIDs  []int64
		attempts []int32
		errs     []string
		history  []string
		logDead  logRows
		logKept  logRows // table-less messages to archive
	)
	if r.cfg.KeepPublished {
		for _, it := range published {
			if it.seq <= 0 {
				logKept.add(it, "", "", r.cfg.Clock.Now())
			}
		}
	}
	for _, it := range dead {
		h := it.history
		if len(h) > historyCap {
			h = h[len(h)-historyCap:]
		}
		js, _ := json.Marshal(h)
		if it.seq <= 0 {
			logDead.add(it, h[len(h)-1].Error, string(js), r.cfg.Clock.Now())
			continue
		}
		deadIDs, attempts = append(deadIDs, it.seq), append(attempts, int32(it.attempts))
		errs, history = append(errs, h[len(h)-1].Error), append(history, string(js))
	}
	if len(ids) == 0 && len(deadIDs) == 0 && len(logDead.ids) == 0 && len(logKept.ids) == 0 {
		return nil, nil, nil
	}
	found := make(map[int64]bool, len(ids)+len(deadIDs))
	var snapText string
	err = pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		var b pgx.Batch
		b.Queue(snapshotSQL)
		if len(ids) > 0 {
			q := deleteSQL
			if r.cfg.KeepPublished {
				q = archiveSQL
			}
			b.Queue(q, ids)
		}
		if len(deadIDs) > 0 {
			b.Queue(deadSQL, deadIDs, attempts, errs, history)
		}
		queries := b.Len()
		if len(logDead.ids) > 0 {
			l := &logDead
			b.Queue(deadLogSQL, l.ids, l.topics, l.keys, l.types, l.versions, l.cts, l.payloads, l.headers,
				l.occurred, l.created, l.attempts, l.errs, l.history)
		}
		if len(logKept.ids) > 0 {
			l := &logKept
			b.Queue(archiveLogSQL, l.ids, l.topics, l.keys, l.types, l.versions, l.cts, l.payloads, l.headers,
				l.occurred, l.created, l.attempts)
		}
		br := tx.SendBatch(ctx, &b)
		if err := br.QueryRow().Scan(&snapText); err != nil {
			br.Close()
			return err
		}
		for range queries - 1 {
			rows, err := br.Query()
			if err != nil {
				br.Close()
				return err
			}
			got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				br.Close()
				return err
			}
			for _, id := range got {
				found[id] = true
			}
		}
		for range b.Len() - queries {
			if _, err := br.Exec(); err != nil {
				br.Close()
				return err
			}
		}
		return br.Close()
	})
	if err != nil {
		return nil, nil, fmt.Errorf("cdc: record %d published and %d dead messages: %w", len(published), len(dead), err)
	}
	for _, list := range [][]*item{published, dead} {
		for _, it := range list {
			if it.seq > 0 && !found[it.seq] {
				missing = append(missing, it)
			}
		}
	}
	if len(missing) == 0 {
		return nil, nil, nil
	}
	snap, err = parseSnapshot(snapText)
	return missing, snap, err
}

// logRows holds the columns of table-less messages written to a table
// (dead letters, or published ones kept), one array each.
type logRows struct {
	ids                            [][16]byte
	topics, keys, types, cts, errs []string
	versions, attempts             []int32
	payloads                       [][]byte
	headers, history               []*string
	occurred, created              []time.Time
}

func (d *logRows) add(it *item, lastErr, history string, now time.Time) {
	m := &it.msg
	var h *string
	if len(m.Headers) > 0 {
		js, _ := json.Marshal(m.Headers)
		s := string(js)
		h = &s
	}
	d.ids = append(d.ids, [16]byte(m.ID))
	d.topics, d.keys, d.types, d.cts = append(d.topics, m.Topic), append(d.keys, m.Key), append(d.types, m.Type), append(d.cts, m.ContentType)
	d.versions, d.attempts = append(d.versions, int32(m.Version)), append(d.attempts, int32(it.attempts))
	d.payloads, d.headers, d.history = append(d.payloads, m.Payload), append(d.headers, h), append(d.history, &history)
	d.occurred, d.created, d.errs = append(d.occurred, m.OccurredAt), append(d.created, now), append(d.errs, lastErr)
}

// metrics are the relay's counters.
type metrics struct {
	published, retried, dead, swept atomic.Int64
	mu                              sync.Mutex
	confirmed                       uint64
	reading, making                 bool
}

func (m *metrics) setConfirmed(lsn uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.confirmed = lsn
}

func (m *metrics) setReading(on, making bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reading, m.making = on, on && making
}

func (m *metrics) snapshot() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := Stats{
		Published: m.published.Load(), Retried: m.retried.Load(), DeadLettered: m.dead.Load(),
		Swept: m.swept.Load(), Reading: m.reading, Making: m.making,
	}
	if m.confirmed > 0 {
		s.Confirmed = lsnString(m.confirmed)
	}
	return s
}

// lsnString writes an LSN as PostgreSQL does.
func lsnString(lsn uint64) string {
	return strconv.FormatUint(lsn>>32, 16) + "/" + strconv.FormatUint(lsn&0xFFFFFFFF, 16)
}
