package mysql

import (
	"database/sql"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/sqlstore"
)

// DatabaseSQL returns the outbox inserter for database/sql transactions on
// MySQL or MariaDB (*sql.Tx from github.com/go-sql-driver/mysql, also the one
// GORM, sqlx, bun or ent hand you), to pass to outbox.New. created_at is the
// server's UTC_TIMESTAMP(6). It is also their store.Scheduler: scheduled
// messages are due by the server's clock.
func DatabaseSQL() store.Inserter[*sql.Tx] { return inserter(nil) }

// inserter returns the inserter that schedules on clock (nil: the
// server's). A statement carries at most 500 messages and, beyond its
// first message, at most 1 MiB of payloads and headers, so it stays within
// the smallest max_allowed_packet in use (4 MiB on old servers) even when
// the DSN sets interpolateParams.
func inserter(clock store.Clock) store.Inserter[*sql.Tx] {
	return sqlstore.Inserter{
		Schedules: dialect(nil, clock).Schedules(),
		Rows:      500,
		Bytes:     1 << 20,
		Created:   func() (string, []any) { return serverNow, nil },
		InsertError: func(err error, n int) error {
			return migrations.InsertError(err, n, errorNumber(err) == errNoSuchTable)
		},
	}
}
