// Package dburl turns a database URL into an open [store.Driver]: it is the
// one place that knows which URL names which dialect, so that wiring code
// (the courier CLI, the reference shop, benchmarks, tests) asks a Driver
// for its stores instead of switching over dialect names.
//
// The URLs it knows:
//
//	postgres://user:password@host:5432/db?search_path=schema   (also postgresql://)
//	mysql://user:password@host:3306/db?timeout=5s               (reserved characters percent-encoded: @ as %40)
//	sqlite:///absolute/path.db
//	sqlite:relative.db, file:relative.db
//
// Every dialect is opened as a store.Driver[*sql.Tx]: one code path serves
// applications on all three. On PostgreSQL the relay's store and the other
// stores that do not take the caller's transaction still use pgx, on a
// pool of their own that Close closes.
//
//	db, err := dburl.Open(ctx, os.Getenv("DATABASE_URL"), dburl.Options{})
//	if err != nil {
//		return err
//	}
//	defer db.Close()
//	st, err := db.RelayStore(ctx, store.RelayConfig{})
//	if err != nil {
//		return err
//	}
package dburl
