package memstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/claims"
)

// HistoryLimit is how many failures a row's history keeps, the latest ones,
// as in the SQL dialects. Attempts counts them all.
const HistoryLimit = 20

// Config configures a Store. The zero value is ready to use.
type Config struct {
	// Clock is the store's time: lease ends, retry times, created_at and
	// Stats.Now read it. Default: the real clock. Tests pass a [Clock]'s
	// Now to make leases expire and retries fall due without sleeping.
	Clock courier.Clock
	// KeepPublished keeps a copy of each published row (see
	// [Store.Published]) instead of only deleting it.
	KeepPublished bool
}

// Store is an outbox in memory. It implements [store.RelayStore] and
// [store.Inserter] for [*Tx], and is safe for concurrent use by any number
// of writers and relays. The zero value is not usable; call [New].
type Store struct {
	now  courier.Clock
	keep bool

	mu        sync.Mutex
	seq       int64              // last Seq allocated
	leaseSeq  int64              // last lease id allocated
	rows      []*row             // pending rows, in Seq order
	leases    map[int64]*lease   // live or expired, until the next claim drops them
	dead      []store.DeadLetter // in order of death
	published []Row
	schedule  []*scheduled // scheduled messages, waiting or released, in scheduling order
	notifiers []*store.LocalNotifier
	locks     map[string]bool      // maintenance locks held (Operations)
	members   map[string]time.Time // relay processes' heartbeats (Operations.Beat)
	holds     map[int64]*hold      // dead letters that hold their key, by id (see hold.go)
	holding   map[string]int64     // the keys they hold, and the id of each one's dead letter
}

var (
	_ store.RelayStore    = (*Store)(nil)
	_ store.Inserter[*Tx] = (*Store)(nil)
)

// row is a pending outbox row.
type row struct {
	rec       store.Record
	createdAt time.Time
	lastError string
	history   []store.PublishAttempt
	retryAt   time.Time // zero: never failed
}

// lease is a claimed batch.
type lease struct {
	owner string
	until time.Time
	seqs  []int64
	keys  []string
}

// New returns an empty store.
func New(cfg Config) *Store {
	return &Store{now: cfg.Clock, keep: cfg.KeepPublished, leases: make(map[int64]*lease)}
}

// NewNotifier returns a notifier for one relay, signalled after every
// commit of a transaction that wrote messages. Give it to the relay as
// relay.Config.Notifier; the outbox writer needs no Notify of its own.
func (s *Store) NewNotifier() *store.LocalNotifier {
	n := store.NewLocalNotifier()
	s.mu.Lock()
	s.notifiers = append(s.notifiers, n)
	s.mu.Unlock()
	return n
}

// Tx is a transaction of a Store: the messages inserted in it become
// visible together when it commits, and never when it rolls back. A Tx is
// not safe for concurrent use.
type Tx struct {
	s         *Store
	rows      []*row
	scheduled []*scheduled
	cancels   []*scheduled
	done      bool
}

// Begin starts a transaction.
func (s *Store) Begin() *Tx { return &Tx{s: s} }

// InTx runs fn in a new transaction and commits it when fn returns nil; it
// rolls it back and returns fn's error otherwise.
func (s *Store) InTx(ctx context.Context, fn func(tx *Tx) error) error {
	tx := s.Begin()
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := ctx.Err(); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// ErrTxDone is returned when a transaction is used after its commit or
// rollback, or with another Store than its own.
var ErrTxDone = errors.New("memstore: transaction already committed or rolled back")

// Commit makes the transaction's messages visible to claims and signals the
// notifiers of [Store.NewNotifier].
func (tx *Tx) Commit() error {
	if tx.done {
		return ErrTxDone
	}
	tx.done = true
	s := tx.s
	s.mu.Lock()
	now := s.now.Now()
	for _, r := range tx.rows {
		r.createdAt = now
		i, _ := slices.BinarySearchFunc(s.rows, r.rec.Seq, func(r *row, seq int64) int { return cmp.Compare(r.rec.Seq, seq) })
		s.rows = slices.Insert(s.rows, i, r)
	}
	s.commitSchedule(tx, now)
	notifiers := slices.Clone(s.notifiers)
	s.mu.Unlock()
	if len(tx.rows) > 0 || len(tx.scheduled) > 0 {
		for _, n := range notifiers {
			n.Signal()
		}
	}
	return nil
}

// Rollback discards the transaction's messages and cancels. It does
// nothing after Commit.
func (tx *Tx) Rollback() {
	if tx.done {
		return
	}
	tx.done = true
	tx.s.mu.Lock()
	tx.s.rollbackSchedule(tx)
	tx.s.mu.Unlock()
}

// Insert implements [store.Inserter]: each message gets its Seq now, and
// becomes visible when tx commits.
func (s *Store) Insert(ctx context.Context, tx *Tx, msgs []courier.Message) error {
	if tx == nil || tx.done || tx.s != s {
		return fmt.Errorf("memstore: insert: %w", ErrTxDone)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		m.OccurredAt = m.OccurredAt.Truncate(time.Microsecond).UTC() // as the dialects store it
		s.seq++
		tx.rows = append(tx.rows, &row{rec: store.Record{Seq: s.seq, Message: cloneMessage(m)}})
	}
	return nil
}

// Claim implements [store.RelayStore].
func (s *Store) Claim(ctx context.Context, owner string, limit int, d time.Duration) (store.Batch, error) {
	if limit < 1 {
		return store.Batch{}, fmt.Errorf("memstore: claim: limit is %d: use 1 or more", limit)
	}
	if err := ctx.Err(); err != nil {
		return store.Batch{}, fmt.Errorf("memstore: claim: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now.Now()
	for id, l := range s.leases {
		if !l.until.After(now) {
			delete(s.leases, id)
		}
	}
	s.holdRows(now)
	pick := claims.NewPicker(s.heldKeys(now), limit)
	for _, r := range s.rows {
		if r.retryAt.After(now) {
			continue // its key is held
		}
		if pick.Offer(r.rec.Seq, r.rec.Message.Key, !r.retryAt.IsZero()) {
			break
		}
	}
	ids := pick.IDs()
	if len(ids) == 0 {
		return store.Batch{}, nil
	}
	s.leaseSeq++
	s.leases[s.leaseSeq] = &lease{owner: owner, until: now.Add(d), seqs: slices.Clone(ids), keys: pick.Keys()}
	batch := store.Batch{Lease: s.leaseSeq, Records: make([]store.Record, 0, len(ids))}
	for _, id := range ids {
		r := s.rows[s.index(id)]
		rec := r.rec
		rec.Message = cloneMessage(rec.Message)
		batch.Records = append(batch.Records, rec)
	}
	return batch, nil
}

// heldKeys returns the keys of live leases, of rows waiting for a retry at
// now, and of dead letters that hold their key.
func (s *Store) heldKeys(now time.Time) map[string]struct{} {
	held := make(map[string]struct{})
	for _, l := range s.leases {
		if l.until.After(now) {
			for _, k := range l.keys {
				held[k] = struct{}{}
			}
		}
	}
	for _, r := range s.rows {
		if r.retryAt.After(now) {
			held[r.rec.Message.Key] = struct{}{}
		}
	}
	for k := range s.holding {
		held[k] = struct{}{}
	}
	return held
}

// index returns the position of the pending row seq in s.rows, or -1.
func (s *Store) index(seq int64) int {
	i, ok := slices.BinarySearchFunc(s.rows, seq, func(r *row, seq int64) int { return cmp.Compare(r.rec.Seq, seq) })
	if !ok {
		return -1
	}
	return i
}

// Complete implements [store.RelayStore]: the outcome is applied only while
// the lease is live and owner's, and the lease ends either way.
func (s *Store) Complete(ctx context.Context, owner string, leaseID int64, o store.Outcome) error {
	return s.complete(ctx, owner, leaseID, o, s.keep)
}

// RelayStore returns a relay store on s's outbox configured by cfg, as
// [store.Database.RelayStore] does: its Claim and Stats are s's, and its
// Complete keeps published rows when cfg.KeepPublished says so, whatever
// s's Config. It never fails; the error is there for the signature.
func (s *Store) RelayStore(_ context.Context, cfg store.RelayConfig) (store.RelayStore, error) {
	return relayView{s, cfg.KeepPublished}, nil
}

// relayView is s with its own KeepPublished.
type relayView struct {
	*Store
	keep bool
}

// Complete implements [store.RelayStore].
func (v relayView) Complete(ctx context.Context, owner string, leaseID int64, o store.Outcome) error {
	return v.complete(ctx, owner, leaseID, o, v.keep)
}

// complete applies o, keeping the published rows when keep is true.
func (s *Store) complete(ctx context.Context, owner string, leaseID int64, o store.Outcome, keep bool) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: complete batch: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now.Now()
	l, ok := s.leases[leaseID]
	if !ok || l.owner != owner {
		return nil
	}
	delete(s.leases, leaseID)
	if !l.until.After(now) {
		return nil // expired: the rows may belong to another relay
	}
	for _, seq := range o.Published {
		s.publish(seq, now, keep)
	}
	for _, f := range o.Retry {
		if i := s.index(f.Seq); i >= 0 {
			r := s.rows[i]
			r.fail(f, now)
			r.retryAt = now.Add(f.Delay)
		}
	}
	for _, f := range o.Dead {
		s.bury(f, now)
	}
	return nil
}

// fail records a failure of r at now.
func (r *row) fail(f store.Failure, now time.Time) {
	if f.Counted {
		r.rec.Attempts++
	}
	r.lastError = f.Error
	r.history = append(r.history, store.PublishAttempt{At: now.UTC(), Error: f.Error, Counted: f.Counted})
	if n := len(r.history); n > HistoryLimit {
		r.history = slices.Clone(r.history[n-HistoryLimit:])
	}
}

// publish deletes the pending row seq, keeping a copy when keep is true.
func (s *Store) publish(seq int64, now time.Time, keep bool) {
	i := s.index(seq)
	if i < 0 {
		return
	}
	if keep {
		p := s.rows[i].snapshot()
		p.PublishedAt = now.UTC()
		s.published = append(s.published, p)
	}
	s.rows = slices.Delete(s.rows, i, i+1)
}

// bury moves the pending row of f to the dead letters.
func (s *Store) bury(f store.Failure, now time.Time) {
	i := s.index(f.Seq)
	if i < 0 {
		return
	}
	r := s.rows[i]
	r.fail(f, now)
	m := r.rec.Message
	s.dead = append(s.dead, store.DeadLetter{
		ID: r.rec.Seq, MessageID: m.ID.String(), Topic: m.Topic, Key: m.Key, Type: m.Type, Version: m.Version,
		ContentType: m.ContentType, Payload: m.Payload, Headers: m.Headers, OccurredAt: m.OccurredAt,
		CreatedAt: r.createdAt.UTC(), Attempts: r.rec.Attempts, LastError: r.lastError,
		History: r.history, DeadAt: now.UTC(),
		Holds: f.Hold && s.holdKey(r.rec.Seq, m.Key, now),
	})
	s.rows = slices.Delete(s.rows, i, i+1)
}

// Stats implements [store.RelayStore]; Now is the store's clock.
func (s *Store) Stats(ctx context.Context) (store.Stats, error) {
	if err := ctx.Err(); err != nil {
		return store.Stats{}, fmt.Errorf("memstore: stats: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now.Now()
	st := store.Stats{Pending: int64(len(s.rows)), DeadLetters: int64(len(s.dead)), Now: now.UTC()}
	for _, l := range s.leases {
		if l.until.After(now) {
			st.Leased += int64(len(l.seqs))
		}
	}
	for _, r := range s.rows {
		if r.retryAt.After(now) {
			st.InBackoff++
		}
	}
	if len(s.rows) > 0 {
		st.OldestPending = s.rows[0].createdAt.UTC()
	}
	s.holdStats(&st)
	return st, nil
}

// Row is an outbox row as [Store.Pending] and [Store.Published] report it.
type Row struct {
	// Record is the row as a claim returns it.
	Record store.Record
	// CreatedAt is when the row's transaction committed.
	CreatedAt time.Time
	// LastError is the latest failure's error, empty before any.
	LastError string
	// History holds the latest HistoryLimit failures, oldest first.
	History []store.PublishAttempt
	// RetryAt is when a failed row may be claimed again; zero before any
	// failure.
	RetryAt time.Time
	// PublishedAt is when the row was published ([Store.Published] only).
	PublishedAt time.Time
}

func (r *row) snapshot() Row {
	rec := r.rec
	rec.Message = cloneMessage(rec.Message)
	return Row{Record: rec, CreatedAt: r.createdAt.UTC(), LastError: r.lastError,
		History: slices.Clone(r.history), RetryAt: r.retryAt}
}

// Pending returns the committed, unpublished rows in Seq order (leased and
// backing-off ones included).
func (s *Store) Pending() []Row {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Row, len(s.rows))
	for i, r := range s.rows {
		out[i] = r.snapshot()
	}
	return out
}

// Published returns the published rows kept with Config.KeepPublished (or
// by a [Store.RelayStore] with RelayConfig.KeepPublished), in the order they
// were published.
func (s *Store) Published() []Row {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.published)
}

// DeadLetters returns the dead letters in the order they were parked.
func (s *Store) DeadLetters() []store.DeadLetter {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.dead)
	for i := range out {
		out[i].History = slices.Clone(out[i].History)
		if h, ok := s.holds[out[i].ID]; ok {
			out[i].Held = int64(len(h.held))
		}
	}
	return out
}

// cloneMessage copies m's payload and headers, so that neither the caller
// nor the store sees the other's later changes.
func cloneMessage(m courier.Message) courier.Message {
	m.Payload = slices.Clone(m.Payload)
	if m.Headers != nil {
		m.Headers = maps.Clone(m.Headers)
	}
	return m
}
