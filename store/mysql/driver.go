package mysql

import (
	"database/sql"
	"time"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/sqldriver"
)

// DefaultPollInterval is the relay's polling interval on MySQL. MySQL has
// no wake-ups across processes, so the relay polls; a poll that finds
// nothing costs one indexed query.
const DefaultPollInterval = 250 * time.Millisecond

// Driver is MySQL or MariaDB through database/sql: a
// store.Driver[*sql.Tx], the one value that hands out every store of the
// database (see store.Driver for each method). It is the way to build
// them: the stores it hands out all take their time from its clock
// ([Driver.WithClock]; the server's UTC_TIMESTAMP(6) by default).
//
//   - Migrate applies the migrations the database lacks, each in order,
//     and returns the versions it applied (none when the schema is
//     current). Concurrent calls, from any process, wait for one another on
//     a named lock (GET_LOCK) scoped to the database. MySQL commits DDL at
//     once, so unlike on PostgreSQL or SQLite a migration that fails
//     halfway leaves its first statements applied; they are all
//     idempotent: fix the cause (the error names the statement) and run
//     Migrate again. Tables are created in the database of db's DSN.
//   - RelayStore checks the schema and that the server has JSON_TABLE
//     (MySQL 8.0, MariaDB 10.6 or newer), which claims need.
//   - Inbox's transactions run at the server's default isolation level
//     (REPEATABLE READ unless configured otherwise): the marker behaves the
//     same at every level. A duplicate waits for the first delivery's
//     transaction at most innodb_lock_wait_timeout (50 s by default), then
//     fails and is retried by the consumer. The inbox marks a group of
//     messages (store.GroupInbox) with one INSERT IGNORE a thousand
//     messages; MySQL has no RETURNING, so when a concurrent delivery
//     marked some of them, it tells the markers it inserted by the
//     transaction's snapshot, which takes REPEATABLE READ: at READ
//     COMMITTED such a group fails, and its next try finds that delivery's
//     markers.
//   - Idempotency compares scopes and keys byte for byte; each may be up to
//     1024 bytes long.
//   - Sagas' transitions load the instance with SELECT … FOR UPDATE, so
//     concurrent transitions of one instance queue on its row (and the
//     version check guards the rest). Saga times are the orchestrator's
//     clock in Unix microseconds.
//   - ConsumerStore records parked_at and the times of failed replays on
//     the driver's clock, a failure's time on the caller's.
//   - Notifier returns nil (MySQL has no wake-ups across processes);
//     PollInterval returns [DefaultPollInterval]; SerialWrites reports
//     false; Rebind returns a statement as it is.
type Driver struct{ base }

// base gives Driver the methods of the driver MySQL shares with SQLite,
// without an exported field.
type base = sqldriver.Driver

var _ store.Driver[*sql.Tx] = Driver{}

// NewDriver returns the Driver on db. The database stays the caller's to
// close.
func NewDriver(db *sql.DB) Driver { return Driver{sqldriver.New(db, &mysqlDialect)} }

// WithClock returns a copy of d whose stores take the time they compare
// with from c instead of the server's clock (see [store.Clock]).
func (d Driver) WithClock(c store.Clock) Driver { return Driver{d.base.WithClock(c)} }

// mysqlDialect is what MySQL tells the driver it shares with SQLite.
var mysqlDialect = sqldriver.Dialect{
	Name:          "mysql",
	PollInterval:  DefaultPollInterval,
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
