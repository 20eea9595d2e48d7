// Command orders is the smallest complete service built on Courier, on the
// embedded default: a SQLite file and a NATS JetStream server inside the
// process, nothing to install.
//
//	POST /orders ─► orders + outbox, one transaction (Idempotency-Key)
//	                   │
//	                 relay ─► NATS JetStream ─► billing consumer (inbox)
//	                                              └─► billing_accounts, once per order
//
// Run it from the repository's root:
//
//	go run ./examples/orders          # a short demo: places orders, prints the accounts, exits
//	go run ./examples/orders -serve   # serves until Ctrl-C, printing how to call it
//
// Ctrl-C (or SIGTERM) stops it gracefully at any time. README.md walks
// through the code.
package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/courier-go/courier/idempotency"
)

// config is what the command line chooses.
type config struct {
	dir   string // for orders.db and the NATS store; "" makes a temporary one
	addr  string // the HTTP server's address
	serve bool   // serve until interrupted instead of running the demo
}

func main() {
	var cfg config
	flag.StringVar(&cfg.dir, "dir", "", "directory for orders.db and the NATS store, kept (default: a temporary one, removed at exit)")
	flag.StringVar(&cfg.addr, "addr", "127.0.0.1:0", "HTTP address (port 0: any free port)")
	flag.BoolVar(&cfg.serve, "serve", false, "serve until Ctrl-C instead of running the demo")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, cfg, os.Stdout)
	stop()
	if err != nil && !errors.Is(err, context.Canceled) { // Ctrl-C is no failure
		fmt.Fprintln(os.Stderr, "orders:", err)
		os.Exit(1)
	}
}

// run opens the service, runs it, and runs the demo against it (or, with
// cfg.serve, waits for ctx to end); then stops the service and returns.
func run(ctx context.Context, cfg config, out io.Writer) error {
	if cfg.dir == "" {
		dir, err := os.MkdirTemp("", "courier-orders-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir) // made just now, by us
		cfg.dir = dir
	}
	// Courier's packages log what goes wrong (retries, outages) to stderr.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := open(ctx, cfg.dir, cfg.addr, log)
	if err != nil {
		return err
	}
	defer s.close()
	fmt.Fprintf(out, "database  %s/orders.db (SQLite)\nbroker    NATS JetStream in this process, stored in %s/nats\napi       POST %s/orders\n\n",
		cfg.dir, cfg.dir, s.url())

	g, ctx := errgroup.WithContext(ctx)
	ctx, finished := context.WithCancel(ctx)
	g.Go(func() error { return s.run(ctx) })
	g.Go(func() error {
		defer finished() // stops the service
		if cfg.serve {
			printUsage(out, s)
			<-ctx.Done()
			return nil
		}
		return demo(ctx, s, out)
	})
	err = g.Wait()
	fmt.Fprintln(out, "stopped")
	return err
}

// printUsage shows how to call the API with this run's API keys.
func printUsage(out io.Writer, s *service) {
	fmt.Fprintf(out, `Place an order as ada (run it twice: the second answer is the first one, replayed):

  curl -i %s/orders -H 'Authorization: Bearer %s' \
    -H 'Idempotency-Key: checkout-1' -d '{"item":"vinyl","total":1999}'

grace's API key is %s. Ctrl-C stops the service.
`, s.url(), s.apiKeys["ada"], s.apiKeys["grace"])
}

// demo is a client of the service: it places orders, sends one of them
// twice as a client that lost the first answer would, waits until billing
// has applied every order, and prints the accounts.
func demo(ctx context.Context, s *service, out io.Writer) error {
	checkouts := []struct {
		customer, item string
		total          int64 // cents
		sends          int
	}{
		{"ada", "vinyl", 1999, 2}, // the retry gets the first answer back
		{"grace", "poster", 950, 1},
		{"ada", "turntable", 24900, 1},
	}
	for _, c := range checkouts {
		key := uuid.NewString() // one Idempotency-Key per checkout, reused by its retries
		for range c.sends {
			status, body, replayed, err := postOrder(ctx, s.url(), s.apiKeys[c.customer], key, c.item, c.total)
			if err != nil {
				return err
			}
			note := ""
			if replayed {
				note = " (replayed: the same Idempotency-Key)"
			}
			fmt.Fprintf(out, "POST /orders  %-5s %-9s %7s  →  %d order %s%s\n",
				c.customer, c.item, dollars(c.total), status, body.OrderID, note)
		}
	}
	if err := waitBilled(ctx, s.db); err != nil {
		return err
	}
	rm, bm := s.relay.Metrics(), s.billing.Metrics()
	fmt.Fprintf(out, "\nrelay     published %d messages\nbilling   applied %d, skipped %d duplicates\n\n", rm.Published, bm.Applied, bm.Duplicates)
	return printAccounts(ctx, s.db, out)
}

// postOrder sends POST /orders and decodes the answer.
func postOrder(ctx context.Context, url, apiKey, idemKey, item string, total int64) (status int, order OrderPlaced, replayed bool, err error) {
	body, err := json.Marshal(orderRequest{Item: item, Total: total})
	if err != nil {
		return 0, order, false, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/orders", bytes.NewReader(body))
	if err != nil {
		return 0, order, false, err
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set(idempotency.HeaderKey, idemKey)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, order, false, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		msg, _ := io.ReadAll(io.LimitReader(res.Body, 1024))
		return res.StatusCode, order, false, fmt.Errorf("POST /orders: %s: %q", res.Status, msg)
	}
	err = json.NewDecoder(res.Body).Decode(&order)
	return res.StatusCode, order, res.Header.Get(idempotency.HeaderReplayed) == "true", err
}

// waitBilled waits until billing has applied every order in the database:
// the relay and the consumer work in the background, and this watches their
// effect, for 30 s at most.
func waitBilled(ctx context.Context, db *sql.DB) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var placed, billed int
		err := db.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM orders),
			(SELECT COALESCE(SUM(orders), 0) FROM billing_accounts)`).Scan(&placed, &billed)
		if err == nil && billed >= placed {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("billing applied %d of %d orders: %w", billed, placed, errors.Join(ctx.Err(), err))
		case <-tick.C:
		}
	}
}

// printAccounts prints every customer's account.
func printAccounts(ctx context.Context, db *sql.DB, out io.Writer) error {
	rows, err := db.QueryContext(ctx, "SELECT customer, orders, balance FROM billing_accounts ORDER BY customer")
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var customer string
		var orders, balance int64
		if err := rows.Scan(&customer, &orders, &balance); err != nil {
			return err
		}
		fmt.Fprintf(out, "account   %-5s %d order(s), owes %s\n", customer, orders, dollars(balance))
	}
	return rows.Err()
}

// dollars formats cents.
func dollars(cents int64) string { return fmt.Sprintf("%d.%02d", cents/100, cents%100) }
