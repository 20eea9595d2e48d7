package ops

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier/store"
)

// messageID selects a message_id column as canonical uuid text on every
// dialect: PostgreSQL prints its uuid so, and MySQL and SQLite hold the
// text every writer stores (uuid.UUID.String(), see package columns).
const messageID = `CAST(message_id AS CHAR(36))`

// PublishedBetween implements store.Operations with one query, streamed
// row by row to fn. The window is a range of the index on published_at (a
// BRIN index on PostgreSQL, B-trees elsewhere), whose rows the database
// then sorts by id: a window as large as an audit reads (its copies' ids
// and short texts, no payloads) sorts in memory or spills to a temporary
// file, and no page of it is read twice, as pages of a paginated read
// would be.
//
// fn runs while the query's rows stream in: on MySQL the server waits for
// them to be read (and drops the connection after net_write_timeout,
// 60 s by default, without progress), so fn should not block for long.
func (o Ops) PublishedBetween(ctx context.Context, from, to time.Time, fn func(store.PublishedCopy) error) error {
	var stopped error
	err := o.d.DB.Query(ctx, `SELECT id, `+messageID+`, topic, ordering_key, type, published_at
FROM courier_outbox_published WHERE published_at >= ? AND published_at < ? ORDER BY id`,
		[]any{o.d.Time.Encode(from), o.d.Time.Encode(to)}, func(scan func(...any) error) error {
			var c store.PublishedCopy
			if err := scan(&c.ID, &c.MessageID, &c.Topic, &c.Key, &c.Type, o.d.Time.Dest(&c.PublishedAt)); err != nil {
				return err
			}
			if err := fn(c); err != nil {
				stopped = err
				return err
			}
			return nil
		})
	if stopped != nil {
		return stopped
	}
	if err != nil {
		return o.errorf("list published copies: %w", err)
	}
	return nil
}

// PublishedBefore implements store.Operations with one query that stops at
// the first copy it finds: a range scan of the B-tree on published_at
// (MySQL, SQLite). PostgreSQL reads its BRIN index's summaries and the few
// pages of the ranges that may hold a copy before t, or, when its
// statistics say many copies do, the table from its start, where the
// oldest copies are (rows arrive in published_at order).
func (o Ops) PublishedBefore(ctx context.Context, t time.Time) (bool, error) {
	found := false
	err := o.d.DB.Query(ctx, `SELECT 1 FROM courier_outbox_published WHERE published_at < ? LIMIT 1`,
		[]any{o.d.Time.Encode(t)}, func(func(...any) error) error { found = true; return nil })
	if err != nil {
		return false, o.errorf("find a published copy before %s: %w", t.Format(time.RFC3339Nano), err)
	}
	return found, nil
}

// LocateChunk is how many ids a Locate looks for with one statement: the
// published copies have no index on message_id, so each statement scans
// them once.
const LocateChunk = 1000

// Locate implements store.Operations with one statement per LocateChunk
// ids, which reads the three tables in one snapshot: the outbox by a scan
// (it holds pending work only, so it is small), the published copies by a
// scan and the dead letters by their unique index on message_id. One
// snapshot means a message that moves between them meanwhile (a relay
// publishes it, an operator replays a dead letter) is seen in one place,
// never in none.
func (o Ops) Locate(ctx context.Context, ids []string) (map[string]store.Place, error) {
	l := NewLookup(ids)
	for chunk := range slices.Chunk(l.IDs, LocateChunk) {
		if err := o.locate(ctx, chunk, l); err != nil {
			return nil, o.errorf("locate %d messages: %w", len(l.IDs), err)
		}
	}
	return l.Places(), nil
}

// locate looks for the messages of ids (canonical texts) in the outbox,
// the published copies and the dead letters, and records in l where it
// finds them.
func (o Ops) locate(ctx context.Context, ids []string, l *Lookup) error {
	in := `message_id IN (` + strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ") + `)`
	var (
		q    strings.Builder
		args []any
	)
	for i, t := range []struct {
		table string
		place store.Place
	}{
		{"courier_outbox", store.PlacePending},
		{"courier_outbox_published", store.PlacePublished},
		{"courier_outbox_dead_letters", store.PlaceDeadLetter},
	} {
		if i > 0 {
			q.WriteString("\nUNION ALL ")
		}
		q.WriteString(`SELECT ` + messageID + `, '` + string(t.place) + `' FROM ` + t.table + ` WHERE ` + in)
		for _, id := range ids {
			args = append(args, id)
		}
	}
	return o.d.DB.Query(ctx, q.String(), args, func(scan func(...any) error) error {
		var id, place string
		if err := scan(&id, &place); err != nil {
			return err
		}
		l.Found(id, store.Place(place))
		return nil
	})
}

// placeOrder is the precedence of the places of Locate: the first that
// holds a message wins.
var placeOrder = []store.Place{store.PlacePending, store.PlacePublished, store.PlaceDeadLetter}

// Lookup gathers the places of a Locate while a store finds them; the
// in-memory store uses it as the SQL dialects do. It holds the rules both
// follow: an id that is not a uuid is left out (no store can hold it, and
// PostgreSQL would fail the whole statement casting it); an id is looked
// for by its canonical text (uuid.UUID.String(), as every store writes
// message ids) and reported under the text it was given in; and the first
// of pending, published and dead letter that holds a message wins.
type Lookup struct {
	// IDs are the canonical texts of the valid ids, each once, in the
	// order given.
	IDs   []string
	given map[string][]string // canonical text → ids as given
	found map[string]store.Place
}

// NewLookup returns the Lookup of ids.
func NewLookup(ids []string) *Lookup {
	l := &Lookup{given: make(map[string][]string), found: make(map[string]store.Place)}
	for _, id := range ids {
		u, err := uuid.Parse(id)
		if err != nil {
			continue
		}
		c := u.String()
		if _, dup := l.given[c]; !dup {
			l.IDs = append(l.IDs, c)
		}
		if !slices.Contains(l.given[c], id) {
			l.given[c] = append(l.given[c], id)
		}
	}
	return l
}

// Found records that p holds the message whose id's canonical text is id,
// unless a place before p holds it too.
func (l *Lookup) Found(id string, p store.Place) {
	if _, asked := l.given[id]; !asked {
		return
	}
	if q, ok := l.found[id]; !ok || slices.Index(placeOrder, p) < slices.Index(placeOrder, q) {
		l.found[id] = p
	}
}

// Places returns the places found, by the ids as given.
func (l *Lookup) Places() map[string]store.Place {
	out := make(map[string]store.Place, len(l.found))
	for c, p := range l.found {
		for _, id := range l.given[c] {
			out[id] = p
		}
	}
	return out
}
