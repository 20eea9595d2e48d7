package sqlite

import (
	"database/sql"
	"time"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/sqlstore"
)

// DatabaseSQL returns the outbox inserter for database/sql transactions on
// SQLite (*sql.Tx, also the one GORM, sqlx, bun or ent hand you), to pass to
// outbox.New. created_at is the writing process's clock. It is also their
// store.Scheduler: scheduled messages are due by the process's clock.
func DatabaseSQL() store.Inserter[*sql.Tx] { return inserter(nil) }

// inserter returns the inserter that schedules on clock (nil: the
// process's). A statement carries at most 1,000 messages, which keeps its
// parameters (one a column: 10 a message in an INSERT, 11 in a schedule)
// well under SQLite's limit of 32766.
func inserter(clock store.Clock) store.Inserter[*sql.Tx] {
	return sqlstore.Inserter{
		Schedules:   dialect(nil, clock).Schedules(),
		Rows:        1000,
		Created:     func() (string, []any) { return "?", []any{time.Now().UnixMicro()} },
		InsertError: func(err error, n int) error { return migrations.InsertError(err, n, isMissing(err)) },
	}
}
