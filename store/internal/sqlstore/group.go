package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/marks"
)

var _ store.GroupInbox[*sql.Tx] = Inbox{}

// markGroupBatch is how many messages one statement of MarkGroup names:
// with 3 arguments a message at most, well within MySQL's 65,535
// placeholders and SQLite's 32,766.
const markGroupBatch = 1000

// errGroupRace is MarkGroup's error when it cannot tell its markers from a
// concurrent delivery's (see Inbox.markBySnapshot).
var errGroupRace = errors.New("a concurrent delivery marked some of the group's messages, and at this isolation level the markers this transaction inserted cannot be told from its; " +
	"run the inbox's transactions at REPEATABLE READ (the server's default), or try the group again: its next try finds that delivery's markers")

// MarkGroup implements store.GroupInbox with Dialect.MarkGroupSQL: the
// markers of up to markGroupBatch messages in one statement, inserted in
// the order of ids (ascending), then their failures deleted as Mark deletes
// one message's (see clearFailures).
func (i Inbox) MarkGroup(ctx context.Context, tx *sql.Tx, consumer string, ids []uuid.UUID) ([]bool, error) {
	if err := i.d.checkConsumer(consumer); err != nil {
		return nil, i.d.errorf("inbox markers: %w", err)
	}
	fresh := make([]bool, 0, len(ids))
	for batch := range slices.Chunk(ids, markGroupBatch) {
		some, err := i.markBatch(ctx, tx, consumer, batch)
		if err != nil {
			return nil, i.d.errorf("inbox markers of %d messages: %w", len(ids), err)
		}
		fresh = append(fresh, some...)
	}
	if err := clearFailures(ctx, tx, consumer, idStrings(ids)...); err != nil {
		return nil, i.d.errorf("clear failures of %d messages: %w", len(ids), err)
	}
	return fresh, nil
}

// markBatch marks ids, a batch of MarkGroup's, in one statement and returns
// their fresh flags: the ids the statement returns where the dialect has
// MarkGroupReturning (SQLite, whose writers take turns), else as
// markBySnapshot tells them.
func (i Inbox) markBatch(ctx context.Context, tx *sql.Tx, consumer string, ids []uuid.UUID) ([]bool, error) {
	if i.d.MarkGroupReturning == "" {
		return i.markBySnapshot(ctx, tx, consumer, ids)
	}
	q, args := i.markGroupSQL(consumer, ids)
	inserted, err := Column[uuid.UUID](ctx, tx, q+i.d.MarkGroupReturning, args...)
	if err != nil {
		return nil, err
	}
	return marks.Fresh(ids, inserted), nil
}

// markBySnapshot marks ids where the statement cannot return the markers
// it inserted (MySQL), in three steps:
//
//  1. It reads which of ids have a marker, without locking anything: a
//     consistent read, which at REPEATABLE READ fixes the transaction's
//     snapshot if no read did before.
//  2. It inserts the markers of the others, as MarkSQL does one: each
//     waits for a concurrent transaction that inserted it, and is a
//     duplicate if that one commits. When it inserted them all (the usual
//     case), or none, the row count tells the flags.
//  3. Otherwise concurrent deliveries committed some of them after the
//     snapshot. Read again in the snapshot, the markers of step 2 are
//     those this transaction inserted: a transaction sees its own rows,
//     and not those committed after its snapshot. At READ COMMITTED a read
//     sees those too: the count of step 2 does not match, and it fails
//     with errGroupRace.
func (i Inbox) markBySnapshot(ctx context.Context, tx *sql.Tx, consumer string, ids []uuid.UUID) ([]bool, error) {
	existing, err := i.markersOf(ctx, tx, consumer, ids)
	if err != nil {
		return nil, err
	}
	rest := slices.DeleteFunc(slices.Clone(ids), func(id uuid.UUID) bool { return slices.Contains(existing, id) })
	if len(rest) == 0 {
		return make([]bool, len(ids)), nil
	}
	q, args := i.markGroupSQL(consumer, rest)
	res, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return nil, err
	}
	inserted := rest
	switch {
	case n == 0:
		inserted = nil
	case n < int64(len(rest)):
		if inserted, err = i.markersOf(ctx, tx, consumer, rest); err != nil {
			return nil, err
		}
		if int64(len(inserted)) != n {
			return nil, errGroupRace
		}
	}
	return marks.Fresh(ids, inserted), nil
}

// markersOf returns which of ids have a marker of consumer that tx sees,
// reading without locking.
func (i Inbox) markersOf(ctx context.Context, tx *sql.Tx, consumer string, ids []uuid.UUID) ([]uuid.UUID, error) {
	list, args := placeholders(idStrings(ids))
	return Column[uuid.UUID](ctx, tx, `SELECT message_id FROM courier_inbox WHERE consumer = ? AND message_id IN (`+list+`)`,
		append([]any{consumer}, args...)...)
}

// markGroupSQL returns MarkGroupSQL with a row for each of ids, in their
// order, and its arguments.
func (i Inbox) markGroupSQL(consumer string, ids []uuid.UUID) (string, []any) {
	now := i.d.now()
	row := "(?, ?, " + i.d.Now + ")"
	args := make([]any, 0, len(ids)*(2+len(now)))
	for _, id := range ids {
		args = append(append(args, consumer, id.String()), now...)
	}
	return i.d.MarkGroupSQL + strings.TrimSuffix(strings.Repeat(row+", ", len(ids)), ", "), args
}

// idStrings returns ids in their text form, as the dialects store them.
func idStrings(ids []uuid.UUID) []string {
	s := make([]string, len(ids))
	for n, id := range ids {
		s[n] = id.String()
	}
	return s
}
