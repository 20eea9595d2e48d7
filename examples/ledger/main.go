// Command ledger is one instance of a consumer that applies each account's
// postings in order, however many instances of it run, fed by the courier
// relay daemon. The postings of an account are its messages (their key is
// the account); the instances share the accounts among them (NATS key
// partitions), and the relay puts each message's key in its subject for
// that (courier relay --key-subjects):
//
//	courier migrate --database-url $DB
//	courier relay --database-url $DB --broker-url nats://127.0.0.1:4222 --key-subjects &
//	go run ./examples/ledger -database-url $DB &              # one instance; start as many as you like
//	go run ./examples/ledger -database-url $DB -write 1000    # 1,000 postings into the outbox, then exit
//
// It needs PostgreSQL ($DB, postgres://…) and nats-server 2.10 or later
// with JetStream. Ctrl-C (or SIGTERM) stops an instance; its accounts move
// to the others. README.md walks through it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store/postgres"
)

// config is what the command line chooses.
type config struct {
	db       string // PostgreSQL URL
	nats     string // NATS URL
	write    int    // postings to write, instead of consuming
	accounts int    // accounts the postings are spread over
}

func main() {
	var cfg config
	flag.StringVar(&cfg.db, "database-url", os.Getenv("DATABASE_URL"), "PostgreSQL URL (default $DATABASE_URL)")
	flag.StringVar(&cfg.nats, "nats", "nats://127.0.0.1:4222", "NATS URL (nats-server 2.10 or later, JetStream on)")
	flag.IntVar(&cfg.write, "write", 0, "write this many postings into the outbox and exit, instead of consuming")
	flag.IntVar(&cfg.accounts, "accounts", 20, "accounts the written postings are spread over")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, cfg, os.Stdout)
	stop()
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "ledger:", err)
		os.Exit(1)
	}
}

// run opens the database and writes postings (cfg.write) or consumes them
// until ctx ends.
func run(ctx context.Context, cfg config, out io.Writer) error {
	if cfg.db == "" {
		return errors.New("no database: set -database-url or DATABASE_URL to a PostgreSQL URL")
	}
	pool, err := pgxpool.New(ctx, cfg.db)
	if err != nil {
		return err
	}
	defer pool.Close()
	d := postgres.NewDriver(pool)
	if _, err := d.Migrate(ctx); err != nil { // Courier's tables, as courier migrate makes them
		return err
	}
	if _, err := pool.Exec(ctx, schema); err != nil {
		return fmt.Errorf("create tables: %w", err)
	}
	if cfg.write > 0 {
		if err := write(ctx, d, cfg.write, cfg.accounts); err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote %d postings over %d accounts\n", cfg.write, cfg.accounts)
		return nil
	}
	return consume(ctx, d, cfg.nats, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
}

// Sharing the accounts among the instances. Every instance of the consumer
// must use the same Partitions; make it at least the most instances you
// will run.
const (
	topic      = "postings"
	consumer   = "ledger"
	partitions = 16
)

// consume applies postings until ctx ends, as one instance of the ledger
// consumer: its subscriber shares the accounts with the other instances
// (nats.SubscriberConfig.Partitions, which needs the key in the subject:
// Config.KeySubjects here, courier relay --key-subjects on the relay), and
// its inbox consumer applies an account's postings one at a time, in
// order (KeepOrder), each exactly once.
func consume(ctx context.Context, d postgres.Driver, url string, log *slog.Logger) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	sub, err := nats.NewSubscriber(ctx, nc, nats.SubscriberConfig{
		Config:     nats.Config{KeySubjects: true},
		Consumer:   consumer,
		Topics:     []string{topic},
		Partitions: partitions,
		Logger:     log,
	})
	if err != nil {
		return err
	}
	defer sub.Close()
	ib, err := inbox.New(d.Inbox(), consumer)
	if err != nil {
		return err
	}
	r := inbox.NewRouter[pgx.Tx]()
	inbox.On(r, apply)
	c, err := inbox.NewConsumer(ib, sub, d.ConsumerStore(), r.Handler(), inbox.ConsumerConfig{KeepOrder: true, Logger: log})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// write writes n postings over accounts accounts into the outbox, a
// transaction each, as an application would with its own change: each
// posting takes its account's next number under the account's row lock,
// so an account's postings are numbered, and published, in the order they
// were written.
func write(ctx context.Context, d postgres.Driver, n, accounts int) error {
	w := outbox.New(d.Inserter(), outbox.Config{})
	for i := range n {
		account := fmt.Sprintf("acct-%d", i%accounts)
		err := d.InTx(ctx, func(tx pgx.Tx) error {
			var seq int64
			err := tx.QueryRow(ctx, `INSERT INTO ledger_accounts (account, written) VALUES ($1, 1)
ON CONFLICT (account) DO UPDATE SET written = ledger_accounts.written + 1 RETURNING written`, account).Scan(&seq)
			if err != nil {
				return err
			}
			msg, err := courier.NewJSON(topic, account, Posted{Account: account, Seq: seq, Amount: int64(1 + i%7)})
			if err != nil {
				return err
			}
			return w.Write(ctx, tx, msg)
		})
		if err != nil {
			return fmt.Errorf("posting %d: %w", i+1, err)
		}
	}
	return nil
}
