package sqlite

import (
	"database/sql"
	"time"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/sqldriver"
)

// DefaultPollInterval is the relay's polling interval on SQLite. SQLite's
// relay polls a local file, which costs next to nothing.
const DefaultPollInterval = 100 * time.Millisecond

// Driver is SQLite through database/sql: a store.Driver[*sql.Tx], the one
// value that hands out every store of the database (see store.Driver for
// each method). It is the way to build them: the stores it hands out all
// take their time from its clock ([Driver.WithClock]; this process's
// time.Now by default). Give it a pool opened with [Open] (or with a DSN of
// your own that sets a busy timeout and _txlock=immediate).
//
//   - Migrate applies the migrations the database lacks, each in order, all
//     in one transaction, and returns the versions it applied (none when
//     the schema is current). The transaction starts with BEGIN IMMEDIATE,
//     so concurrent calls, in this process or another on the same file,
//     wait for one another (up to the connection's busy timeout). Tables are
//     created in the main database of db's connections.
//   - RelayStore checks the schema and that db's connections wait for the
//     write lock (a busy timeout). Relays of one process should share one
//     relay store, which queues their claims and completions in the process
//     (see the package documentation, Several relays).
//   - Inbox's InTx begins each transaction with BEGIN IMMEDIATE, taking the
//     database's write lock before the marker is inserted: a concurrent
//     delivery of the same message, in this process or another, waits for
//     the lock and then finds the marker, or, when the first transaction
//     rolled back, applies the message itself. The transactions of one
//     inbox take turns in the process, so share it between the consumers of
//     a process, and do not start another of its transactions inside a
//     handler. processed_at is the driver's clock.
//   - Idempotency claims and serves requests one at a time per file (see
//     the package documentation, Idempotent requests).
//   - Sagas' transactions begin with BEGIN IMMEDIATE, so transitions of one
//     instance queue for the write lock; the version check still guards
//     against a transition whose load happened in an earlier transaction.
//   - ConsumerStore records parked_at and the times of failed replays on
//     the driver's clock, a failure's time on the caller's.
//   - Notifier returns nil (SQLite cannot notify other connections of a
//     commit; see [store.LocalNotifier] for relays in the writers' process);
//     PollInterval returns [DefaultPollInterval]; SerialWrites reports true;
//     Rebind returns a statement as it is.
type Driver struct{ base }

// base gives Driver the methods of the driver SQLite shares with MySQL,
// without an exported field.
type base = sqldriver.Driver

var _ store.Driver[*sql.Tx] = Driver{}

// NewDriver returns the Driver on db. The database stays the caller's to
// close.
func NewDriver(db *sql.DB) Driver { return Driver{sqldriver.New(db, &sqliteDialect)} }

// WithClock returns a copy of d whose stores take the time they compare
// with from c instead of time.Now (see [store.Clock]).
func (d Driver) WithClock(c store.Clock) Driver { return Driver{d.base.WithClock(c)} }

// sqliteDialect is what SQLite tells the driver it shares with MySQL.
var sqliteDialect = sqldriver.Dialect{
	Name:          "sqlite",
	PollInterval:  DefaultPollInterval,
	SerialWrites:  true,
	Schema:        migrations,
	Migrate:       migrate,
	SchemaVersion: schemaVersion,
	Inserter:      inserter,
	Stores:        dialect,
	RelayStore:    newRelayStore,
	Idempotency:   idempotency,
	Operations:    operations,
	ReplayRuns:    replayRuns,
	Delivery:      delivery,
}
