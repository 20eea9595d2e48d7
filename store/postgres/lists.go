package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
)

// listWhere returns what follows WHERE in the query of q (checked
// already), its condition, order and limit, and its arguments: the rows
// of courier_outbox_dead_letters, or with parked those of
// courier_inbox_dead_letters. A filter is built only when set, so that the
// plan of an unfiltered page is a walk of the primary key from After.
func listWhere(q store.ListQuery, parked bool) (string, []any) {
	var conds []string
	args := []any{}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	conds = append(conds, "id > "+arg(q.After))
	switch {
	case q.Topic != "" && parked:
		suffix := arg("." + q.Topic)
		conds = append(conds, fmt.Sprintf("(subject = %s OR right(subject, length(%s::text)) = %s)", arg(q.Topic), suffix, suffix))
	case q.Topic != "":
		conds = append(conds, "topic = "+arg(q.Topic))
	}
	if parked && q.Consumer != "" {
		conds = append(conds, "consumer = "+arg(q.Consumer))
	}
	if q.Error != "" {
		e := arg(q.Error)
		c := fmt.Sprintf("strpos(lower(last_error), lower(%s::text)) > 0", e)
		if parked {
			c = fmt.Sprintf("(%s OR strpos(lower(reason), lower(%s::text)) > 0)", c, e)
		}
		conds = append(conds, c)
	}
	if len(q.IDs) > 0 {
		conds = append(conds, "id = ANY("+arg(q.IDs)+")")
	}
	// The limit's placeholder is made before args is returned: the order
	// in which a return list reads a variable and calls a function is not
	// defined.
	tail := " ORDER BY id LIMIT " + arg(q.Limit)
	return strings.Join(conds, " AND ") + tail, args
}

// deadSummary and parkedSummary are the columns of the summaries, each
// text cut by the server (package columns): a row's headers, reason or
// error may be megabytes long, and a list sends kilobytes. octet_length
// of a bytea is its size, read from the TOAST pointer without fetching
// the payload. The type of a parked delivery is read from its headers by
// name (->'name'->>0: the first value, NULL when the header is missing or
// is not an array), the rest of the headers left in the database.
var (
	deadSummary = `id, message_id::text, ` + columns.Preview("topic") + `, ` + columns.Preview("ordering_key") + `, ` + columns.Preview("type") +
		`, attempts, ` + columns.ErrorPreview + `, octet_length(payload), created_at, dead_at, holds`
	parkedSummary = `id, ` + columns.Preview("consumer") + `, ` + columns.Preview("message_id") + `, ` + columns.Preview("subject") + `, ` +
		columns.ParkedType(func(name string) string { return "headers->'" + name + "'->>0" }) + `, ` + columns.Preview("reason") + `, ` +
		columns.ErrorPreview + `, attempts, octet_length(payload), parked_at, replay_requested, ` +
		columns.Preview("COALESCE(ordering_key, '')") + `, COALESCE(behind, 0)`
)

// ListDeadLetters lists summaries.
func (a admin) ListDeadLetters(ctx context.Context, q store.ListQuery) ([]store.DeadLetterSummary, error) {
	q, err := q.Check()
	if err != nil {
		return nil, fmt.Errorf("postgres: list dead letters: %w", err)
	}
	where, args := listWhere(q, false)
	rows, err := a.pool.Query(ctx, `SELECT `+deadSummary+` FROM courier_outbox_dead_letters WHERE `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list dead letters: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.DeadLetterSummary, error) {
		var d store.DeadLetterSummary
		err := r.Scan(&d.ID, &d.MessageID, &d.Topic, &d.Key, &d.Type, &d.Attempts, &d.LastError, &d.PayloadSize, &d.CreatedAt, &d.DeadAt, &d.Holds)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: list dead letters: %w", err)
	}
	return out, nil
}

// ListParked lists summaries of parked deliveries.
func (a admin) ListParked(ctx context.Context, q store.ListQuery) ([]store.ParkedSummary, error) {
	q, err := q.Check()
	if err != nil {
		return nil, fmt.Errorf("postgres: list parked messages: %w", err)
	}
	where, args := listWhere(q, true)
	rows, err := a.pool.Query(ctx, `SELECT `+parkedSummary+` FROM courier_inbox_dead_letters WHERE `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list parked messages: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.ParkedSummary, error) {
		var p store.ParkedSummary
		err := r.Scan(&p.ID, &p.Consumer, &p.MessageID, &p.Subject, &p.Type, &p.Reason, &p.Error, &p.Attempts, &p.PayloadSize,
			&p.ParkedAt, &p.ReplayRequested, &p.Key, &p.Behind)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: list parked messages: %w", err)
	}
	return out, nil
}
