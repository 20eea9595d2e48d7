package sqlstore

import (
	"context"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
)

// listWhere returns the condition (with ? placeholders) and the arguments
// that select the rows of q (checked already): those of
// courier_outbox_dead_letters, or with parked those of
// courier_inbox_dead_letters. MySQL and SQLite both take its functions:
// SUBSTR with a negative start counts characters from the end, and INSTR
// finds a text as it is (no LIKE pattern).
func listWhere(q store.ListQuery, parked bool) (string, []any) {
	conds, args := []string{"id > ?"}, []any{q.After}
	switch {
	case q.Topic != "" && parked:
		suffix := "." + q.Topic
		conds = append(conds, "(subject = ? OR SUBSTR(subject, ?) = ?)")
		args = append(args, q.Topic, -utf8.RuneCountInString(suffix), suffix)
	case q.Topic != "":
		conds = append(conds, "topic = ?")
		args = append(args, q.Topic)
	}
	if parked && q.Consumer != "" {
		conds = append(conds, "consumer = ?")
		args = append(args, q.Consumer)
	}
	if q.Error != "" {
		if parked {
			conds = append(conds, "(INSTR(LOWER(last_error), LOWER(?)) > 0 OR INSTR(LOWER(reason), LOWER(?)) > 0)")
			args = append(args, q.Error, q.Error)
		} else {
			conds = append(conds, "INSTR(LOWER(last_error), LOWER(?)) > 0")
			args = append(args, q.Error)
		}
	}
	if len(q.IDs) > 0 {
		conds = append(conds, "id IN (?"+strings.Repeat(", ?", len(q.IDs)-1)+")")
		for _, id := range q.IDs {
			args = append(args, id)
		}
	}
	return strings.Join(conds, " AND "), append(args, q.Limit)
}

// deadSummary is the columns of a dead letter's summary, each text cut
// by the server (package columns): a list sends kilobytes of rows that
// may hold megabytes. LENGTH of a BLOB is its size in bytes, which SQLite
// reads without the blob.
var deadSummary = `id, message_id, ` + columns.Preview("topic") + `, ` + columns.Preview("ordering_key") + `, ` + columns.Preview("type") +
	`, attempts, ` + columns.ErrorPreview + `, LENGTH(payload), created_at, dead_at, holds`

// parkedSummary is the columns of a parked delivery's summary, like
// deadSummary's: its type read from its headers by name, the rest of the
// headers left in the database.
func (d Dialect) parkedSummary() string {
	return `id, ` + columns.Preview("consumer") + `, ` + columns.Preview("message_id") + `, ` + columns.Preview("subject") + `, ` +
		columns.ParkedType(d.HeaderValue) + `, ` + columns.Preview("reason") + `, ` + columns.ErrorPreview +
		`, attempts, LENGTH(payload), parked_at, replay_requested, ` + columns.Preview("COALESCE(ordering_key, '')") + `, COALESCE(behind, 0)`
}

// ListDeadLetters implements store.Admin. It reads the summary's columns
// only.
func (a Admin) ListDeadLetters(ctx context.Context, q store.ListQuery) ([]store.DeadLetterSummary, error) {
	q, err := q.Check()
	if err != nil {
		return nil, a.d.errorf("list dead letters: %w", err)
	}
	where, args := listWhere(q, false)
	out, err := queryAll(ctx, a.d.DB, func(row interface{ Scan(...any) error }) (store.DeadLetterSummary, error) {
		var d store.DeadLetterSummary
		err := row.Scan(&d.ID, &d.MessageID, &d.Topic, &d.Key, &d.Type, &d.Attempts, &d.LastError, &d.PayloadSize,
			a.d.Dest(&d.CreatedAt), a.d.Dest(&d.DeadAt), &d.Holds)
		return d, err
	}, `SELECT `+deadSummary+` FROM courier_outbox_dead_letters WHERE `+where+` ORDER BY id LIMIT ?`, args...)
	if err != nil {
		return nil, a.d.errorf("list dead letters: %w", err)
	}
	return out, nil
}

// ListParked implements store.Admin.
func (a Admin) ListParked(ctx context.Context, q store.ListQuery) ([]store.ParkedSummary, error) {
	q, err := q.Check()
	if err != nil {
		return nil, a.d.errorf("list parked messages: %w", err)
	}
	where, args := listWhere(q, true)
	out, err := queryAll(ctx, a.d.DB, func(row interface{ Scan(...any) error }) (store.ParkedSummary, error) {
		var (
			p      store.ParkedSummary
			replay time.Time
		)
		replayed := a.d.Dest(&replay)
		err := row.Scan(&p.ID, &p.Consumer, &p.MessageID, &p.Subject, &p.Type, &p.Reason, &p.Error, &p.Attempts, &p.PayloadSize,
			a.d.Dest(&p.ParkedAt), replayed, &p.Key, &p.Behind)
		if err != nil {
			return p, err
		}
		if replayed.Valid {
			p.ReplayRequested = &replay
		}
		return p, nil
	}, `SELECT `+a.d.parkedSummary()+` FROM courier_inbox_dead_letters WHERE `+where+` ORDER BY id LIMIT ?`, args...)
	if err != nil {
		return nil, a.d.errorf("list parked messages: %w", err)
	}
	return out, nil
}
