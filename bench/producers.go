package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store/dburl"
	"github.com/courier-go/courier/store/postgres"
)

// The producers section measures the write path of the outbox's clients in
// other languages against Go's outbox.Writer: one writer, producersN
// transactions in a row, each inserting one business row and one message,
// on every dialect. Python and Node.js run bench/producers/write.py and
// write.js (the clients in clients/python and clients/node), which time
// their own loop, so an interpreter's start is not counted. On PostgreSQL
// the clients call the courier_write function, which checks the message in
// the database; "Go, courier_write" calls it from Go, which separates the
// function's cost from the language's.

// The producers section's flags.
var (
	// producersPython is the Python interpreter that imports psycopg and
	// PyMySQL.
	producersPython string
	// producersNodeModules is the node_modules directory holding pg,
	// mysql2 and better-sqlite3.
	producersNodeModules string
)

func init() {
	flag.StringVar(&producersPython, "python", envOr("BENCH_PYTHON", "/usr/bin/python3"), "Python interpreter with psycopg and PyMySQL, for the producers section (env BENCH_PYTHON)")
	flag.StringVar(&producersNodeModules, "node-modules", os.Getenv("BENCH_NODE_MODULES"), "node_modules directory with pg, mysql2 and better-sqlite3, for the producers section (env BENCH_NODE_MODULES)")
}

// envOr returns the environment variable name, or def when it is unset.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// producersN is the number of transactions of one measurement.
const producersN = 3000

// The producers measured, in the order of the table's columns.
const (
	prodGo     = "go"
	prodGoFunc = "gofunc" // Go calling courier_write (PostgreSQL only)
	prodPython = "python"
	prodNode   = "node"
)

// producerLanguages are the producers of every dialect.
var producerLanguages = []string{prodGo, prodGoFunc, prodPython, prodNode}

// producerFigures has one figure: transactions a second.
var producerFigures = []Figure{
	{ID: "prod_tx", Section: "producers", Label: "Transactions (one business row + one message)", Unit: "tx/s", Digits: -1},
}

// prodKey is the results key of a producer on a dialect.
func prodKey(lang, dialect string) string { return lang + "_" + dialect }

// prodOrders is the business table of the producers section.
const prodOrders = "CREATE TABLE bench_orders (id varchar(64) PRIMARY KEY, total integer NOT NULL)"

// prodPayload is every message's payload: a small order as JSON.
var prodPayload = []byte(`{"order":"order-0000000","customer":"customer-42","total":12345,"currency":"EUR","lines":3}`)

// runProducers measures every producer on every dialect, the dialects in
// an order that turns with run.
func (b *Bench) runProducers(ctx context.Context, try func(string, func() error), run int) {
	for _, d := range rotate(dialects, run-1) {
		for _, lang := range producerLanguages {
			if lang == prodGoFunc && d != "postgres" {
				continue
			}
			try(fmt.Sprintf("producers: %s on %s", lang, dialectName(d)), func() error { return b.runProducer(ctx, lang, d) })
		}
	}
}

// producerTarget is what a producer's script connects to, as JSON.
type producerTarget struct {
	Dialect  string `json:"dialect"`
	N        int    `json:"n"`
	URL      string `json:"url,omitempty"`    // PostgreSQL: a libpq URL
	Schema   string `json:"schema,omitempty"` // PostgreSQL: the search_path
	Host     string `json:"host,omitempty"`   // MySQL
	Port     int    `json:"port,omitempty"`
	User     string `json:"user,omitempty"`
	Password string `json:"password,omitempty"`
	Database string `json:"database,omitempty"`
	Path     string `json:"path,omitempty"` // SQLite: the file
}

// runProducer measures one producer on a fresh database of dialect.
func (b *Bench) runProducer(ctx context.Context, lang, dialect string) error {
	target := producerTarget{Dialect: dialect, N: producersN}
	var goWrite func(ctx context.Context) (time.Duration, error)
	switch dialect {
	case "postgres":
		env, err := newSchemaEnv(ctx, b.admin, b.cfg.pgURL, b.cfg.natsURL, "prod")
		if err != nil {
			return err
		}
		defer env.Close()
		if err := (&courierSystem{}).Prepare(ctx, env); err != nil {
			return fmt.Errorf("prepare: %w", err)
		}
		if _, err := env.Pool.Exec(ctx, prodOrders); err != nil {
			return err
		}
		target.URL, target.Schema = b.cfg.pgURL, env.Schema
		goWrite = func(ctx context.Context) (time.Duration, error) {
			return goProducePostgres(ctx, env, lang == prodGoFunc)
		}
	default:
		d, err := dialectByName(dialect)
		if err != nil {
			return err
		}
		db, err := d.fresh(b, ctx)
		if err != nil {
			return err
		}
		defer db.cleanup()
		if _, err := db.SQL().ExecContext(ctx, prodOrders); err != nil {
			return err
		}
		if err := setTarget(&target, db.url); err != nil {
			return err
		}
		goWrite = func(ctx context.Context) (time.Duration, error) { return goProduceSQL(ctx, db.DB) }
	}
	var took time.Duration
	var err error
	switch lang {
	case prodGo, prodGoFunc:
		took, err = goWrite(ctx)
	default:
		took, err = b.scriptProduce(ctx, lang, target)
	}
	var nm errNotMeasured
	if errors.As(err, &nm) {
		logf("  not measured: %s", nm.why)
		b.results.Skip("prod_tx", prodKey(lang, dialect), nm.why)
		return nil
	}
	if err != nil {
		return err
	}
	b.results.Add("prod_tx", prodKey(lang, dialect), float64(producersN)/took.Seconds())
	return nil
}

// setTarget fills the MySQL or SQLite fields of t from a freshDB's URL.
func setTarget(t *producerTarget, raw string) error {
	u, err := dburl.Parse(raw, dburl.Options{})
	if err != nil {
		return err
	}
	if u.Dialect == "sqlite" {
		t.Path = u.Conn
		return nil
	}
	cfg, err := gomysql.ParseDSN(u.Conn)
	if err != nil {
		return err
	}
	host, port, _ := strings.Cut(cfg.Addr, ":")
	t.Host, t.User, t.Password, t.Database = host, cfg.User, cfg.Passwd, cfg.DBName
	if _, err := fmt.Sscan(port, &t.Port); err != nil {
		t.Port = 3306
	}
	return nil
}

// prodMessage is the i-th message of a producer.
func prodMessage(i int) courier.Message {
	return courier.NewMessage("orders", fmt.Sprintf("order-%d", i%1000), "OrderPlaced", prodPayload, courier.WithContentType(courier.ContentTypeJSON))
}

// goProducePostgres runs the Go producer on PostgreSQL with pgx: through
// outbox.Writer, or calling courier_write when viaFunction.
func goProducePostgres(ctx context.Context, env *Env, viaFunction bool) (time.Duration, error) {
	conn, err := env.Pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	w := outbox.New(postgres.Pgx(), outbox.Config{})
	start := time.Now()
	for i := range producersN {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO bench_orders (id, total) VALUES ($1, $2)", fmt.Sprintf("o-%d", i), i); err != nil {
				return err
			}
			m := prodMessage(i)
			if viaFunction {
				_, err := tx.Exec(ctx, "SELECT courier_write($1, $2, $3, $4, NULL, $5)", m.Topic, m.Key, m.Type, m.Payload, m.ContentType)
				return err
			}
			return w.Write(ctx, tx, m)
		})
		if err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

// goProduceSQL runs the Go producer on a MySQL or SQLite database through
// outbox.Writer.
func goProduceSQL(ctx context.Context, db *dburl.DB) (time.Duration, error) {
	w := outbox.New(db.Inserter(), outbox.Config{})
	insert := "INSERT INTO bench_orders (id, total) VALUES (?, ?)"
	start := time.Now()
	for i := range producersN {
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, insert, fmt.Sprintf("o-%d", i), i); err != nil {
				return err
			}
			return w.Write(ctx, tx, prodMessage(i))
		})
		if err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

// scriptProduce runs the producer script of lang (bench/producers/write.py
// or write.js) on target and returns the time its loop took, as it says.
func (b *Bench) scriptProduce(ctx context.Context, lang string, target producerTarget) (time.Duration, error) {
	spec, err := json.Marshal(target)
	if err != nil {
		return 0, err
	}
	dir := producersDir()
	var cmd *exec.Cmd
	switch lang {
	case prodPython:
		if _, err := exec.LookPath(producersPython); err != nil {
			return 0, errNotMeasured{fmt.Sprintf("no Python at %s (-python)", producersPython)}
		}
		cmd = exec.CommandContext(ctx, producersPython, filepath.Join(dir, "write.py"), string(spec))
	case prodNode:
		if producersNodeModules == "" {
			return 0, errNotMeasured{"no node_modules with pg, mysql2 and better-sqlite3 (-node-modules)"}
		}
		cmd = exec.CommandContext(ctx, "node", filepath.Join(dir, "write.js"), string(spec))
		cmd.Env = append(os.Environ(), "NODE_PATH="+producersNodeModules)
	default:
		return 0, fmt.Errorf("unknown producer %q", lang)
	}
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("%s producer: %v: %s", lang, err, strings.TrimSpace(stderr.String()))
	}
	var res struct {
		Seconds float64 `json:"seconds"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || res.Seconds <= 0 {
		return 0, fmt.Errorf("%s producer printed %q, want {\"seconds\": …}", lang, out.String())
	}
	return time.Duration(res.Seconds * float64(time.Second)), nil
}

// producersDir is bench/producers: producers below the working directory
// (the bench runs in bench/), or bench/producers below it (run from the
// repository's root), found without source paths (-trimpath drops them).
func producersDir() string {
	for _, dir := range []string{"producers", filepath.Join("bench", "producers")} {
		if _, err := os.Stat(filepath.Join(dir, "write.py")); err == nil {
			if abs, err := filepath.Abs(dir); err == nil {
				return abs
			}
			return dir
		}
	}
	return "producers"
}

// renderProducers renders the producers table: one row per dialect, one
// column per producer, then each other language's ratio to Go's Writer.
func renderProducers(sb *strings.Builder, fn *footnotes, res *Results, cfg config) {
	f := producerFigures[0]
	fmt.Fprintf(sb, "Write path from other languages (one writer, %s transactions in a row, each one business row and one message; tx/s, ↑ better):\n\n", thousands(producersN))
	sb.WriteString("| Dialect | Go (outbox.Writer) | Go, courier_write | Python | Node.js | Python ÷ Go | Node.js ÷ Go |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, d := range dialects {
		fmt.Fprintf(sb, "| %s |", dialectName(d))
		for _, lang := range producerLanguages {
			c, _, ok := cell(res, fn, f, prodKey(lang, d), cfg.runs)
			if !ok && len(res.SkippedOf(f.ID, prodKey(lang, d))) > 0 {
				c = "not measured (" + strings.Join(res.SkippedOf(f.ID, prodKey(lang, d)), "; ") + ")"
			}
			sb.WriteString(" " + c + " |")
		}
		goSt, okGo := res.Stat(f.ID, prodKey(prodGo, d))
		for _, lang := range []string{prodPython, prodNode} {
			st, ok := res.Stat(f.ID, prodKey(lang, d))
			if !ok || !okGo || goSt.Median == 0 {
				sb.WriteString(" — |")
				continue
			}
			fmt.Fprintf(sb, " %.2f× |", st.Median/goSt.Median)
		}
		sb.WriteString("\n")
	}
	sb.WriteString("\nOn PostgreSQL the clients call courier_write, which checks the message in the database; on MySQL/MariaDB and SQLite they check it themselves and insert the row.\n")
}

// producersSettingsText documents how the producers section is measured.
func producersSettingsText(config) string {
	return fmt.Sprintf(`- **Write path from other languages** (Courier alone, every dialect): a fresh database of each dialect (a PostgreSQL
  schema, a SQLite file, a MySQL/MariaDB database; migrated by Courier) with a table `+"`bench_orders`"+`; one writer commits %s
  transactions in a row, each one `+"`bench_orders`"+` row and one 91-byte JSON message on 1,000 keys. **Go**: `+"`outbox.Writer`"+`
  (pgx on PostgreSQL, database/sql elsewhere, in this process); **Go, courier_write**: the same loop calling `+"`courier_write`"+`
  (PostgreSQL only), which separates the function's cost from the language's; **Python** (`+"`bench/producers/write.py`"+`,
  psycopg 3, PyMySQL, sqlite3) and **Node.js** (`+"`bench/producers/write.js`"+`, pg, mysql2, better-sqlite3) with the clients in
  `+"`clients/`"+`, which time their own loop (the interpreter's start is not counted). Every SQLite connection commits with
  `+"`synchronous = FULL`"+`. No relay runs. The dialects' order turns from run to run.
`, thousands(producersN))
}
