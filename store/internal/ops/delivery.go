package ops

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/courier-go/courier/store"
)

// Upsert returns the clause that ends an INSERT into a table whose primary
// key is key so that a row of the same key is replaced: each of cols is
// set to the value the INSERT gave it.
type Upsert func(key string, cols []string) string

// OnConflict is the upsert of PostgreSQL and SQLite.
func OnConflict(key string, cols []string) string {
	set := make([]string, len(cols))
	for i, c := range cols {
		set[i] = c + " = excluded." + c
	}
	return " ON CONFLICT (" + key + ") DO UPDATE SET " + strings.Join(set, ", ")
}

// OnDuplicateKey is the upsert of MySQL and MariaDB. VALUES(col), which
// MySQL 8.0.20 deprecated for an alias of the inserted row, is what both
// read.
func OnDuplicateKey(_ string, cols []string) string {
	set := make([]string, len(cols))
	for i, c := range cols {
		set[i] = c + " = VALUES(" + c + ")"
	}
	return " ON DUPLICATE KEY UPDATE " + strings.Join(set, ", ")
}

// Delivery is the store.Delivery of a Dialect: its DB, Clock, NowSQL and
// Time are all it uses, with the dialect's upsert.
type Delivery struct {
	o      Ops
	upsert Upsert
}

var _ store.Delivery = Delivery{}

// NewDelivery returns the audit watches and latency samples of d's
// database; upsert replaces a watch of the same name (OnConflict or
// OnDuplicateKey).
func NewDelivery(d Dialect, upsert Upsert) Delivery { return Delivery{Ops{d}, upsert} }

// watchColumns are courier_audit_watches' columns, name first, in the
// order SaveWatch writes them and Watches reads them.
var watchColumns = []string{"name", "broker", "window_from", "window_to", "passes", "failed", "lost", "phantoms",
	"duplicates", "order_breaks", "interval_ns", "last_error", "findings", "started_at", "updated_at"}

// SaveWatch implements store.Delivery.
func (d Delivery) SaveWatch(ctx context.Context, w store.AuditWatch) error {
	if err := d.checkWatch(w); err != nil {
		return err
	}
	now, err := d.o.now(ctx)
	if err != nil {
		return err
	}
	var findings any // NULL without findings
	if len(w.Findings) > 0 {
		findings = string(w.Findings)
	}
	q := `INSERT INTO courier_audit_watches (` + strings.Join(watchColumns, ", ") + `)
VALUES (` + strings.TrimSuffix(strings.Repeat("?, ", len(watchColumns)), ", ") + `)` + d.upsert("name", watchColumns[1:])
	args := []any{w.Name, w.Broker, d.nullTime(w.From), d.nullTime(w.To), w.Passes, w.Failed, w.Lost, w.Phantoms,
		w.Duplicates, w.OrderBreaks, int64(w.Interval), w.LastError, findings, d.nullTime(w.StartedAt), d.o.d.Time.Encode(now)}
	if _, err := d.o.d.DB.Exec(ctx, q, args...); err != nil {
		return d.o.errorf("save audit watch %q: %w", w.Name, err)
	}
	return nil
}

// checkWatch returns why w cannot be saved, nil when it can.
func (d Delivery) checkWatch(w store.AuditWatch) error {
	if w.Name == "" {
		return d.o.errorf("save an audit watch: Name is empty: name the watch (one per broker or stream audited)")
	}
	counts := []struct {
		field string
		n     int64
	}{{"Passes", w.Passes}, {"Failed", w.Failed}, {"Lost", w.Lost}, {"Phantoms", w.Phantoms},
		{"Duplicates", w.Duplicates}, {"OrderBreaks", w.OrderBreaks}, {"Interval", int64(w.Interval)}}
	for _, c := range counts {
		if c.n < 0 {
			return d.o.errorf("save audit watch %q: %s is %d: give 0 or more", w.Name, c.field, c.n)
		}
	}
	if len(w.Findings) > 0 && !json.Valid(w.Findings) {
		return d.o.errorf("save audit watch %q: Findings is not JSON: give the findings as package audit encodes them (a JSON array), or none", w.Name)
	}
	return nil
}

// nullTime encodes t for a nullable time column: NULL when t is zero.
func (d Delivery) nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return d.o.d.Time.Encode(t.UTC().Truncate(time.Microsecond))
}

// Watches implements store.Delivery.
func (d Delivery) Watches(ctx context.Context) ([]store.AuditWatch, error) {
	out := []store.AuditWatch{}
	err := d.o.d.DB.Query(ctx, `SELECT `+strings.Join(watchColumns, ", ")+` FROM courier_audit_watches`, nil,
		func(scan func(...any) error) error {
			var (
				w        store.AuditWatch
				interval int64
				findings sql.NullString
			)
			t := d.o.d.Time
			if err := scan(&w.Name, &w.Broker, t.Dest(&w.From), t.Dest(&w.To), &w.Passes, &w.Failed, &w.Lost, &w.Phantoms,
				&w.Duplicates, &w.OrderBreaks, &interval, &w.LastError, &findings, t.Dest(&w.StartedAt), t.Dest(&w.UpdatedAt)); err != nil {
				return err
			}
			w.Interval = time.Duration(interval)
			if findings.Valid {
				w.Findings = json.RawMessage(findings.String)
			}
			out = append(out, w)
			return nil
		})
	if err != nil {
		return nil, d.o.errorf("list audit watches: %w", err)
	}
	// By name, byte for byte, whatever the database's collation.
	slices.SortFunc(out, func(a, b store.AuditWatch) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// DeleteWatch implements store.Delivery.
func (d Delivery) DeleteWatch(ctx context.Context, name string) (bool, error) {
	n, err := d.o.d.DB.Exec(ctx, `DELETE FROM courier_audit_watches WHERE name = ?`, name)
	if err != nil {
		return false, d.o.errorf("delete audit watch %q: %w", name, err)
	}
	return n > 0, nil
}

// latencyColumns are the columns RecordLatency writes.
var latencyColumns = []string{"consumer", "topic", "recorded_at", "period_ns", "messages", "sum_seconds", "skewed", "buckets"}

// latencyBatch is the most samples one INSERT writes: 800 parameters,
// within every dialect's limit (SQLite's 999 before version 3.32).
const latencyBatch = 100

// RecordLatency implements store.Delivery: one INSERT, or for more than
// latencyBatch samples one transaction of several.
func (d Delivery) RecordLatency(ctx context.Context, samples []store.LatencySample) error {
	rows := make([][]any, 0, len(samples))
	for i, s := range samples {
		if problem := checkSample(s); problem != "" {
			return d.o.errorf("record latency: sample %d (consumer %q, topic %q): %s", i, s.Consumer, s.Topic, problem)
		}
		if s.Messages == 0 {
			continue
		}
		buckets, err := json.Marshal(s.Buckets)
		if err != nil {
			return d.o.errorf("record latency: sample %d: %w", i, err)
		}
		if s.Buckets == nil {
			buckets = []byte("[]")
		}
		rows = append(rows, []any{s.Consumer, s.Topic, nil, int64(s.Period), s.Messages, s.SumSeconds, s.Skewed, string(buckets)})
	}
	if len(rows) == 0 {
		return nil
	}
	now, err := d.o.now(ctx)
	if err != nil {
		return err
	}
	at := d.o.d.Time.Encode(now)
	insert := func(db DB, rows [][]any) error {
		q := `INSERT INTO courier_latency (` + strings.Join(latencyColumns, ", ") + `) VALUES `
		row := `(` + strings.TrimSuffix(strings.Repeat("?, ", len(latencyColumns)), ", ") + `)`
		args := make([]any, 0, len(rows)*len(latencyColumns))
		for i, r := range rows {
			if i > 0 {
				q += ", "
			}
			q += row
			r[2] = at
			args = append(args, r...)
		}
		_, err := db.Exec(ctx, q, args...)
		return err
	}
	if len(rows) <= latencyBatch {
		err = insert(d.o.d.DB, rows)
	} else {
		err = d.o.d.DB.Tx(ctx, func(db DB) error {
			for batch := range slices.Chunk(rows, latencyBatch) {
				if err := insert(db, batch); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err != nil {
		return d.o.errorf("record latency: %w", err)
	}
	return nil
}

// checkSample returns why s cannot be recorded, "" when it can.
func checkSample(s store.LatencySample) string {
	switch {
	case s.Consumer == "":
		return "Consumer is empty: name the consumer that applied the messages"
	case s.Topic == "":
		return "Topic is empty: name the topic of the messages"
	case s.Messages < 0:
		return fmt.Sprintf("Messages is %d: count the messages applied (0 or more)", s.Messages)
	case s.Skewed < 0:
		return fmt.Sprintf("Skewed is %d: count the messages applied before they occurred (0 or more)", s.Skewed)
	case s.Period < 0:
		return fmt.Sprintf("Period is %s: give how long the consumer counted (0 or more)", s.Period)
	case s.SumSeconds < 0 || math.IsNaN(s.SumSeconds) || math.IsInf(s.SumSeconds, 0):
		return fmt.Sprintf("SumSeconds is %v: give the latencies' sum in seconds (0 or more, finite)", s.SumSeconds)
	}
	for i, n := range s.Buckets {
		if n < 0 {
			return fmt.Sprintf("Buckets[%d] is %d: count the messages of each bucket (0 or more)", i, n)
		}
	}
	return ""
}

// Latency implements store.Delivery: a range of the index on
// (recorded_at, id).
func (d Delivery) Latency(ctx context.Context, since time.Time, limit int) ([]store.LatencySample, error) {
	if limit <= 0 {
		return nil, d.o.errorf("read latency: limit is %d: give 1 or more (at most %d are returned)", limit, store.MaxLatencyRows)
	}
	limit = min(limit, store.MaxLatencyRows)
	q := `SELECT id, ` + strings.Join(latencyColumns, ", ") + ` FROM courier_latency`
	args := []any{}
	if !since.IsZero() {
		q += ` WHERE recorded_at >= ?`
		args = append(args, d.o.d.Time.Encode(since.UTC().Truncate(time.Microsecond)))
	}
	q += ` ORDER BY recorded_at, id LIMIT ?`
	args = append(args, limit)
	out := []store.LatencySample{}
	err := d.o.d.DB.Query(ctx, q, args, func(scan func(...any) error) error {
		var (
			s       store.LatencySample
			period  int64
			buckets string
		)
		if err := scan(&s.ID, &s.Consumer, &s.Topic, d.o.d.Time.Dest(&s.At), &period, &s.Messages, &s.SumSeconds, &s.Skewed, &buckets); err != nil {
			return err
		}
		s.Period = time.Duration(period)
		if err := json.Unmarshal([]byte(buckets), &s.Buckets); err != nil {
			return fmt.Errorf("sample %d: buckets %q are not a JSON array of counts: %w", s.ID, buckets, err)
		}
		out = append(out, s)
		return nil
	})
	if err != nil {
		return nil, d.o.errorf("read latency: %w", err)
	}
	return out, nil
}
