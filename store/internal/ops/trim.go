package ops

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/courier-go/courier/store"
)

// trimmed is a table Trim deletes from by a time column: key names the
// columns that identify a row.
type trimmed struct{ table, col, key string }

var trimmedTables = map[store.Table]trimmed{
	store.TablePublished:     {"courier_outbox_published", "published_at", "rowid"},
	store.TableInboxMarkers:  {"courier_inbox", "processed_at", "consumer, message_id"},
	store.TableInboxFailures: {"courier_inbox_failures", "failed_at", "id"},
	store.TableKeys:          {"courier_idempotency_keys", "expires_at", "scope, idem_key"},
	store.TableDeadLetters:   {"courier_outbox_dead_letters", "dead_at", "id"},
	store.TableParked:        {"courier_inbox_dead_letters", "parked_at", "id"},
	store.TableReleased:      {"courier_outbox_scheduled", "released_at", "id"},
	store.TableLatency:       {"courier_latency", "recorded_at", "id"},
}

// Trim implements store.Operations: one statement (one batch) in a
// transaction of its own, or for sagas one transaction deleting a batch of
// finished instances and their history.
func (o Ops) Trim(ctx context.Context, t store.Trim) (store.Trimmed, error) {
	if t.Limit <= 0 {
		t.Limit = defaultLimit
	}
	if t.Table == store.TableSagas {
		n, err := o.trimSagas(ctx, t)
		if err != nil {
			return store.Trimmed{}, o.errorf("trim finished sagas: %w", err)
		}
		return store.Trimmed{Deleted: n}, nil
	}
	tt, ok := trimmedTables[t.Table]
	if !ok {
		return store.Trimmed{}, fmt.Errorf("%s: trim %q: %w", o.d.Name, t.Table, store.ErrUnknownTable)
	}
	query, returning := o.d.Delete(tt.table, tt.col, tt.key, t.After != "")
	args := []any{o.d.Time.Encode(t.Before), t.Limit}
	if t.After != "" {
		args = append([]any{t.After}, args...)
	}
	var out store.Trimmed
	err := o.d.DB.Tx(ctx, func(db DB) error {
		if o.d.TrimSettings != "" {
			if _, err := db.Exec(ctx, o.d.TrimSettings); err != nil {
				return err
			}
		}
		if !returning {
			n, err := db.Exec(ctx, query, args...)
			out.Deleted = n
			return err
		}
		return db.Query(ctx, query, args, func(scan func(...any) error) error { return scan(&out.Deleted, &out.Next) })
	})
	if err != nil {
		return store.Trimmed{}, o.errorf("trim %s: %w", tt.table, err)
	}
	if out.Deleted == 0 {
		out.Next = ""
	}
	return out, nil
}

// trimSagas deletes up to t.Limit sagas that finished before t.Before,
// with their history, oldest first.
func (o Ops) trimSagas(ctx context.Context, t store.Trim) (int64, error) {
	limit := min(t.Limit, 500) // two parameters per saga in the IN lists
	var n int64
	err := o.d.DB.Tx(ctx, func(db DB) error {
		var keys []any
		err := db.Query(ctx, `SELECT saga_type, id FROM courier_sagas
WHERE phase IN ('completed', 'cancelled') AND updated_at < ? ORDER BY updated_at LIMIT ?`,
			[]any{o.d.SagaTime.Encode(t.Before), limit}, func(scan func(...any) error) error {
				var typ, id string
				if err := scan(&typ, &id); err != nil {
					return err
				}
				keys = append(keys, typ, id)
				return nil
			})
		if err != nil || len(keys) == 0 {
			return err
		}
		in := strings.TrimSuffix(strings.Repeat("(?, ?), ", len(keys)/2), ", ")
		if _, err := db.Exec(ctx, `DELETE FROM courier_saga_history WHERE (saga_type, saga_id) IN (`+in+`)`, keys...); err != nil {
			return err
		}
		n, err = db.Exec(ctx, `DELETE FROM courier_sagas WHERE phase IN ('completed', 'cancelled') AND (saga_type, id) IN (`+in+`)`, keys...)
		return err
	})
	return n, err
}

// Micros is the codec of BIGINT columns of Unix microseconds.
var Micros = Codec{
	Encode: func(t time.Time) any { return t.UnixMicro() },
	Dest:   func(t *time.Time) any { return &micros{t} },
}

type micros struct{ t *time.Time }

func (m *micros) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		return nil
	case int64:
		*m.t = time.UnixMicro(v).UTC()
	case []byte:
		var us int64
		if _, err := fmt.Sscan(string(v), &us); err != nil {
			return fmt.Errorf("read %q as Unix microseconds: %w", v, err)
		}
		*m.t = time.UnixMicro(us).UTC()
	default:
		return fmt.Errorf("cannot read %T as Unix microseconds", src)
	}
	return nil
}
