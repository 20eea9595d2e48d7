package store

import (
	"context"
	"errors"
	"time"
)

// Operations is what operators' tools need to watch and maintain a
// database: a status snapshot of everything Courier keeps ([Status]), the
// search for what is stuck and its repair ([Reconciliation]), retention
// deletes in small batches ([Trim]) and a lock that keeps one maintenance
// job running at a time. `courier status`, `courier reconcile`, `courier
// cleanup` and package store/cleanup are built on it; metrics and health
// endpoints read the same Status.
//
// Every read is bounded: the outbox and the lease, dead-letter, parked and
// failure tables are small by design (they hold pending work or trouble)
// and are read whole; the tables that grow with traffic (published copies,
// inbox markers, idempotency keys, finished sagas) are counted up to
// [CountLimit] rows and estimated from the database's statistics beyond
// that (Count.Estimated), and never scanned in full, but by an audit,
// which an operator runs on purpose: PublishedBetween reads a window of
// the published copies, and Locate scans them for the few ids asked.
// docs/operations.md lists each query and the index it uses.
//
// Times are compared with the store's clock (see [Clock]): the database's
// own unless the driver was given one.
type Operations interface {
	// Status reports the state of the outbox, the relays' leases, both
	// kinds of dead letters, the consumers, the sagas and the
	// idempotency keys.
	Status(ctx context.Context) (Status, error)
	// Reconcile finds what is stuck, as o defines it: leases past their
	// end, rows retried for long, sagas past their deadline, idempotency
	// keys in flight past their lock. Each list holds at most o.Limit
	// entries, oldest first.
	Reconcile(ctx context.Context, o ReconcileOptions) (Reconciliation, error)
	// ReleaseLease deletes lease id if it has ended (its rows are then
	// claimable, which they already were for a claim) and reports whether
	// it did; a lease that was completed meanwhile, or is live, stays.
	ReleaseLease(ctx context.Context, id int64) (bool, error)
	// ReleaseKey deletes the idempotency key record (scope, key) if it is
	// still in flight and its lock has expired, so that the client's retry
	// starts afresh at once, and reports whether it did; a record completed
	// or taken over meanwhile stays.
	ReleaseKey(ctx context.Context, scope, key string) (bool, error)
	// Trim deletes one batch of old rows, as t says, in a short transaction
	// of its own, and returns how many it deleted and where the next batch
	// may start. Call it until it deletes fewer than t.Limit rows.
	Trim(ctx context.Context, t Trim) (Trimmed, error)
	// TryLock takes the database-wide maintenance lock name without
	// waiting: a PostgreSQL advisory lock or a MySQL GET_LOCK, held on a
	// connection of its own until release is called. ok is false when
	// another process holds it. SQLite runs one writer at a time, and its
	// TryLock always succeeds: two cleanups then interleave their batches,
	// which is harmless.
	TryLock(ctx context.Context, name string) (release func(), ok bool, err error)
	// PublishedBetween calls fn with each copy of a published message
	// (RelayConfig.KeepPublished) published at or after from and before
	// to, in id order, reading them with one query (which sorts the
	// window's copies by id). An error fn returns ends the reading and is
	// returned.
	PublishedBetween(ctx context.Context, from, to time.Time, fn func(PublishedCopy) error) error
	// PublishedBefore reports whether a copy of a published message
	// published before t is kept: when none is, the copies of what was
	// published before the first one kept were trimmed or never kept.
	PublishedBefore(ctx context.Context, t time.Time) (bool, error)
	// Locate returns where the database holds each message of ids
	// (message ids, as text) that it holds at all: pending in the outbox,
	// as a published copy or as a dead letter (the first of these that
	// holds it). Ids it does not hold are left out. The published copies
	// and the outbox have no index on the message id: each 1,000 ids cost
	// a scan of both (the outbox holds only pending rows) and a lookup in
	// the dead letters' unique index. Call it with the few ids an audit
	// could not place otherwise.
	Locate(ctx context.Context, ids []string) (map[string]Place, error)
	// Beat records that the relay process owner is alive until ttl from
	// now, by the store's clock, and returns the owners alive now (owner
	// among them), sorted. Relay processes that share a set of tenants
	// (package tenant) call it as their heartbeat and divide the tenants
	// among the owners it returns.
	Beat(ctx context.Context, owner string, ttl time.Duration) ([]string, error)
	// Leave removes owner's heartbeat at once, so that the others take
	// its share without waiting for it to expire.
	Leave(ctx context.Context, owner string) error
}

// CountLimit is how many rows a Status count reads at most. A table the
// database estimates (PostgreSQL's pg_class.reltuples, MySQL's
// information_schema.TABLES) to hold more is not read at all: the estimate
// is the count. When the estimate is missing or too low and there are more
// rows than this, the count is CountLimit, a lower bound.
const CountLimit = 100_000

// Count is the number of rows of a table that grows with traffic.
type Count struct {
	// N is the count.
	N int64 `json:"n"`
	// Estimated is true when N exceeds CountLimit: it comes from the
	// database's statistics, or is CountLimit, a lower bound.
	Estimated bool `json:"estimated,omitempty"`
}

// Status is a snapshot of everything Courier keeps in a database.
type Status struct {
	// Now is the store's clock when the snapshot was taken.
	Now time.Time `json:"now"`
	// Outbox is the outbox as a whole, as Stats reports it.
	Outbox Stats `json:"outbox"`
	// Topics are the outbox and its dead letters per topic, by topic.
	Topics []TopicStatus `json:"topics"`
	// Relays are the owners of the leases in the lease table, live or
	// ended, by owner.
	Relays []RelayStatus `json:"relays"`
	// Published counts the copies of published rows
	// (RelayConfig.KeepPublished); OldestPublished is when the oldest of
	// them was published, zero when unknown (PostgreSQL: its index on
	// published_at is a BRIN index, which cannot say) or when there is
	// none.
	Published       Count     `json:"published"`
	OldestPublished time.Time `json:"oldest_published,omitzero"`
	// Consumers are the consumers with parked deliveries, recorded
	// failures or held keys, by name.
	Consumers []ConsumerStatus `json:"consumers"`
	// InboxMarkers counts the dedup markers of all consumers.
	InboxMarkers Count `json:"inbox_markers"`
	// Sagas are the saga instances by type, phase and state.
	Sagas []SagaCount `json:"sagas"`
	// OverdueSagas are, per saga type, the unfinished instances whose
	// deadline has passed.
	OverdueSagas []OverdueSagas `json:"overdue_sagas"`
	// Keys are the Idempotency-Key records.
	Keys KeyStatus `json:"idempotency_keys"`
	// Scheduled are the scheduled messages that wait (store.Scheduler).
	Scheduled ScheduledStatus `json:"scheduled"`
	// Slots are the logical replication slots of the database, by name:
	// those a CDC relay (package relay/cdc) reads the outbox through, and
	// any other. PostgreSQL only; other dialects report none.
	Slots []ReplicationSlot `json:"replication_slots"`
}

// ScheduledStatus is the scheduled messages that wait to be released.
type ScheduledStatus struct {
	// Waiting counts them.
	Waiting Count `json:"waiting"`
	// Due counts those whose due time has passed: a running relay releases
	// them within milliseconds, so a count that stays above zero means no
	// relay runs.
	Due int64 `json:"due"`
	// NextDue is when the earliest of them falls due; zero when none
	// waits.
	NextDue time.Time `json:"next_due,omitzero"`
}

// TopicStatus is one topic's outbox rows and dead letters.
type TopicStatus struct {
	Topic string `json:"topic"`
	// Pending counts unpublished rows, leased and in backoff included.
	Pending int64 `json:"pending"`
	// Leased counts pending rows leased to a relay.
	Leased int64 `json:"leased"`
	// InBackoff counts pending rows waiting for a retry.
	InBackoff int64 `json:"in_backoff"`
	// OldestPending is when the oldest pending row was written; zero when
	// none is pending.
	OldestPending time.Time `json:"oldest_pending,omitzero"`
	// DeadLetters counts relay-side dead letters.
	DeadLetters int64 `json:"dead_letters"`
	// HeldKeys counts the topic's dead letters that hold their key
	// (Failure.Hold); OldestHold is when the oldest of them became a dead
	// letter, zero when none does.
	HeldKeys   int64     `json:"held_keys"`
	OldestHold time.Time `json:"oldest_hold,omitzero"`
	// Held counts the topic's messages waiting behind a dead letter that
	// holds their key (which may be another topic's: a key is held across
	// topics).
	Held int64 `json:"held"`
}

// OldestPendingAge is how long the topic's oldest pending row has waited
// at now, or 0.
func (t TopicStatus) OldestPendingAge(now time.Time) time.Duration {
	if t.OldestPending.IsZero() {
		return 0
	}
	return now.Sub(t.OldestPending)
}

// OldestHoldAge is how long the topic's oldest held key has been held at
// now, or 0 when none is.
func (t TopicStatus) OldestHoldAge(now time.Time) time.Duration {
	if t.OldestHold.IsZero() {
		return 0
	}
	return now.Sub(t.OldestHold)
}

// RelayStatus is one lease owner (a relay instance) and its leases.
type RelayStatus struct {
	Owner string `json:"owner"`
	// Leases counts its leases; Rows the rows they hold.
	Leases int64 `json:"leases"`
	Rows   int64 `json:"rows"`
	// Expired counts its leases that have ended without being completed: a
	// relay that stopped or froze in the middle of a batch.
	Expired int64 `json:"expired"`
	// Until is when its latest lease ends.
	Until time.Time `json:"until"`
}

// ConsumerStatus is one consumer's trouble: parked deliveries, failed
// runs of its handler and the keys it holds.
type ConsumerStatus struct {
	Consumer string `json:"consumer"`
	// Parked counts consume-side dead letters; ReplayRequested those an
	// operator asked to replay; OldestParked when the oldest was parked.
	Parked          int64     `json:"parked"`
	ReplayRequested int64     `json:"replay_requested"`
	OldestParked    time.Time `json:"oldest_parked,omitzero"`
	// FailingMessages counts messages with recorded failed runs (retried,
	// not yet applied nor parked); Failures counts the runs.
	FailingMessages int64     `json:"failing_messages"`
	Failures        int64     `json:"failures"`
	OldestFailure   time.Time `json:"oldest_failure,omitzero"`
	// HeldKeys counts the keys the consumer holds (inbox.ConsumerConfig
	// HoldKeys): each stopped by a parked delivery, its cause. Held counts
	// the deliveries parked behind them (reason held; among Parked);
	// OldestHold is when the oldest hold began, zero when there is none.
	HeldKeys   int64     `json:"held_keys"`
	Held       int64     `json:"held"`
	OldestHold time.Time `json:"oldest_hold,omitzero"`
}

// SagaCount is how many saga instances of a type are in a phase and state.
type SagaCount struct {
	Type  string `json:"type"`
	Phase string `json:"phase"`
	// State is the instance's state; empty for finished instances, which
	// are counted per phase only.
	State string `json:"state,omitempty"`
	Count int64  `json:"count"`
	// Estimated is true when finished instances were counted up to
	// CountLimit only.
	Estimated bool `json:"estimated,omitempty"`
}

// OverdueSagas are a saga type's unfinished instances past their deadline.
type OverdueSagas struct {
	Type  string `json:"type"`
	Count int64  `json:"count"`
	// OldestDeadline is the earliest deadline among them.
	OldestDeadline time.Time `json:"oldest_deadline"`
}

// KeyStatus counts Idempotency-Key records.
type KeyStatus struct {
	// InFlight counts records whose request has not completed;
	// LockExpired those of them whose lock has expired (their request
	// died; the next retry takes the key over).
	InFlight    int64 `json:"in_flight"`
	LockExpired int64 `json:"lock_expired"`
	// Completed counts records holding a response.
	Completed Count `json:"completed"`
}

// ReplicationSlot is one logical replication slot of the database
// (PostgreSQL's pg_replication_slots, joined on its reader's row of
// pg_stat_replication). A slot keeps the write-ahead log from the position
// its reader confirmed: a slot nobody reads makes PostgreSQL keep every WAL
// segment written since, until max_slot_wal_keep_size (if set) drops it.
type ReplicationSlot struct {
	// Name is the slot's name; Plugin its output plugin (pgoutput for a
	// CDC relay).
	Name   string `json:"name"`
	Plugin string `json:"plugin"`
	// Active is true while a reader is connected to it; ActivePID is its
	// walsender's process id, 0 when none.
	Active    bool  `json:"active"`
	ActivePID int32 `json:"active_pid,omitempty"`
	// WALStatus is PostgreSQL's verdict on the WAL the slot needs:
	// reserved, extended (beyond max_wal_size, still kept), unreserved
	// (past max_slot_wal_keep_size, lost at the next checkpoint unless the
	// reader catches up) or lost (the slot is unusable: drop it, and let a
	// new one be made).
	WALStatus string `json:"wal_status"`
	// LagBytes is how far the reader's confirmed position
	// (confirmed_flush_lsn) is behind the end of the log
	// (pg_current_wal_lsn()): log written that the reader has not yet
	// confirmed. All of the database cluster's log counts, not only the
	// outbox's, so an idle reader may lag a little.
	LagBytes int64 `json:"lag_bytes"`
	// RetainedBytes is the log PostgreSQL keeps for the slot, from its
	// restart_lsn to the end of the log: the disk it costs. It is at least
	// LagBytes' worth of log, and 0 when the slot is lost.
	RetainedBytes int64 `json:"retained_bytes"`
	// LagSeconds is pg_stat_replication's flush_lag of the slot's reader,
	// in seconds, when PostgreSQL knows it, and nil otherwise. For logical
	// replication it is the time from the walsender decoding and sending a
	// transaction to the reader confirming it (a CDC relay confirms once it
	// has published the transaction's messages): how far behind publishing
	// runs while the reader keeps up with the log. It does not count the
	// time log waited before it was decoded (while no reader ran, say):
	// LagBytes does. PostgreSQL samples it at most once a second while
	// log flows, and clears it (nil) once the reader has caught up and
	// nothing new comes; it is nil for a slot without a reader, and for a
	// reader of another database user unless this one may read all
	// statistics (pg_read_all_stats).
	LagSeconds *float64 `json:"lag_seconds"`
	// Failover is PostgreSQL's flag (version 17 and later) that lets
	// standbys keep a copy of the slot (with sync_replication_slots on
	// them), so that a promoted standby has it; always false before
	// version 17.
	Failover bool `json:"failover"`
	// Standbys counts the physical standbys streaming from the slot's
	// server when the status was read.
	Standbys int `json:"standbys"`
}

// LostOnFailover reports whether promoting one of the server's standbys
// would leave the slot behind: standbys stream from the server and the
// slot is not a failover slot. A CDC relay then makes a new slot on the
// promoted server and publishes the outbox's rows again, but the
// table-less messages (postgres.LogOnly) the old slot held unpublished
// are lost.
func (s ReplicationSlot) LostOnFailover() bool { return s.Standbys > 0 && !s.Failover }

// Lost reports whether PostgreSQL has removed WAL the slot needs: its
// reader can never read from it again.
func (s ReplicationSlot) Lost() bool { return s.WALStatus == "lost" }

// ReconcileOptions say what counts as stuck. The zero value finds every
// ended lease, every in-flight key whose lock has expired and every saga
// past its deadline, but no retried rows.
type ReconcileOptions struct {
	// LeaseGrace is how long a lease must have ended to count. Default 0.
	LeaseGrace time.Duration
	// RetryAttempts: a row waiting for a retry counts once its attempts
	// reach it. 0: attempts do not matter.
	RetryAttempts int
	// RetryAge: a row waiting for a retry counts once it is older than
	// this. 0: age does not matter. With neither set no row counts.
	RetryAge time.Duration
	// SagaGrace is how long a saga's deadline must have passed to count.
	// Default 0.
	SagaGrace time.Duration
	// KeyGrace is how long an in-flight key's lock must have expired to
	// count. Default 0.
	KeyGrace time.Duration
	// Limit caps each list; default 1,000.
	Limit int
}

// Reconciliation is what Reconcile found stuck.
type Reconciliation struct {
	// Now is the store's clock when it looked.
	Now time.Time `json:"now"`
	// ExpiredLeases are leases past their end: their owner stopped or froze
	// before completing the batch. Claims ignore them already; ReleaseLease
	// deletes them.
	ExpiredLeases []Lease `json:"expired_leases"`
	// RetriedRows are pending rows that have failed for long: the broker
	// keeps rejecting them, and each holds its key's later rows back.
	RetriedRows []RetriedRow `json:"retried_rows"`
	// OverdueSagas are unfinished sagas past their deadline: no runner of
	// their type (saga.Orchestrator.Run) has fired it.
	OverdueSagas []OverdueSaga `json:"overdue_sagas"`
	// StaleKeys are idempotency keys left in flight past their lock: their
	// request died before completing. ReleaseKey deletes them.
	StaleKeys []StaleKey `json:"stale_keys"`
}

// Empty reports whether nothing was found.
func (r Reconciliation) Empty() bool {
	return len(r.ExpiredLeases)+len(r.RetriedRows)+len(r.OverdueSagas)+len(r.StaleKeys) == 0
}

// Lease is a relay's claim on a batch of rows.
type Lease struct {
	ID        int64     `json:"id"`
	Owner     string    `json:"owner"`
	Rows      int64     `json:"rows"`
	CreatedAt time.Time `json:"created_at"`
	Until     time.Time `json:"until"`
}

// RetriedRow is a pending outbox row that failed and waits for a retry.
type RetriedRow struct {
	Seq       int64     `json:"seq"`
	MessageID string    `json:"message_id"`
	Topic     string    `json:"topic"`
	Key       string    `json:"key"`
	Attempts  int       `json:"attempts"`
	LastError string    `json:"last_error"`
	CreatedAt time.Time `json:"created_at"`
	RetryAt   time.Time `json:"retry_at"`
}

// OverdueSaga is an unfinished saga instance past its deadline.
type OverdueSaga struct {
	Type     string    `json:"type"`
	ID       string    `json:"id"`
	State    string    `json:"state"`
	Phase    string    `json:"phase"`
	Attempts int       `json:"attempts"`
	Deadline time.Time `json:"deadline"`
}

// StaleKey is an Idempotency-Key record in flight past its lock.
type StaleKey struct {
	Scope       string    `json:"scope"`
	Key         string    `json:"key"`
	CreatedAt   time.Time `json:"created_at"`
	LockedUntil time.Time `json:"locked_until"`
}

// Table names what Trim deletes from.
type Table string

// The tables Trim keeps short, and the time each is trimmed by.
const (
	// TablePublished: copies of published rows, by published_at.
	TablePublished Table = "published"
	// TableInboxMarkers: consumers' dedup markers, by processed_at.
	TableInboxMarkers Table = "inbox_markers"
	// TableInboxFailures: failed runs left behind (the message was neither
	// applied nor parked), by failed_at.
	TableInboxFailures Table = "inbox_failures"
	// TableKeys: Idempotency-Key records, by expires_at (the retention the
	// request set when it claimed the key).
	TableKeys Table = "idempotency_keys"
	// TableSagas: completed and cancelled sagas with their history, by
	// the time they finished (updated_at).
	TableSagas Table = "sagas"
	// TableDeadLetters: relay-side dead letters, by dead_at.
	TableDeadLetters Table = "dead_letters"
	// TableParked: consume-side dead letters, by parked_at.
	TableParked Table = "parked"
	// TableReleased: scheduled messages released into the outbox, kept
	// (without their payloads) so that a cancel can say they were
	// published, by released_at.
	TableReleased Table = "released"
	// TableLatency: the consumers' latency samples (store.Delivery's
	// RecordLatency, package latency), by the time they were recorded.
	TableLatency Table = "latency"
)

// Tables lists every Table, in the order a cleanup trims them.
var Tables = []Table{TablePublished, TableInboxMarkers, TableInboxFailures, TableKeys, TableSagas, TableDeadLetters, TableParked, TableReleased, TableLatency}

// ErrUnknownTable is returned by Trim for a Table not in Tables.
var ErrUnknownTable = errors.New("unknown table")

// Trim is one batch of a retention delete.
type Trim struct {
	// Table to delete from.
	Table Table
	// Before: rows whose time (see Table) is before it go.
	Before time.Time
	// After, when not empty, is where the batch starts: Trimmed.Next of the
	// previous batch of the same pass, an opaque position. It spares the
	// database from walking again past what the previous batches deleted
	// (PostgreSQL keeps deleted rows until vacuum). Start each pass with
	// none: a row can land behind the position (PostgreSQL reuses free
	// space), and the next pass finds it.
	After string
	// Limit is the most rows deleted; default 1,000. A saga counts as one
	// row with its history.
	Limit int
}

// Trimmed is the result of a Trim.
type Trimmed struct {
	// Deleted counts the rows deleted.
	Deleted int64
	// Next is the After of the next batch; empty when the dialect does not
	// need one.
	Next string
}
