package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"

	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/broker/nats/embedded"
	"github.com/courier-go/courier/idempotency"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/sqlite"
)

// service is the orders service, wired: its broker and database, and what
// runs on them (the HTTP server, the relay, the billing consumer).
type service struct {
	nats     *embedded.Server
	nc       *natsgo.Conn
	db       *sql.DB
	wake     *store.LocalNotifier
	relay    *relay.Relay
	billing  *inbox.Consumer[*sql.Tx]
	server   *http.Server
	listener net.Listener
	apiKeys  map[string]string // customer → API key
	closers  []func()          // what close undoes, in the order it was made
}

// open wires the service on the embedded default, its files in dir, its
// HTTP server listening on addr. Nothing runs until run is called; close
// releases everything open made.
func open(ctx context.Context, dir, addr string, log *slog.Logger) (_ *service, err error) {
	s := &service{}
	defer func() {
		if err != nil {
			s.close()
		}
	}()

	// The broker: a NATS server with JetStream in this process, storing
	// messages in dir/nats, and the stream that keeps courier.> subjects.
	if s.nats, err = embedded.Start(embedded.Config{Dir: filepath.Join(dir, "nats")}); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, s.nats.Shutdown)
	if s.nc, err = couriernats.Connect(s.nats.ClientURL()); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, s.nc.Close)
	if err = couriernats.EnsureStream(ctx, s.nc, couriernats.Config{}, couriernats.StreamConfig{}); err != nil {
		return nil, err
	}

	// The database: one SQLite file with Courier's tables and ours.
	if s.db, err = sqlite.Open(filepath.Join(dir, "orders.db")); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() { _ = s.db.Close() })
	if _, err = sqlite.Migrate(ctx, s.db); err != nil {
		return nil, err
	}
	if _, err = s.db.ExecContext(ctx, schema); err != nil {
		return nil, fmt.Errorf("create tables: %w", err)
	}

	// The writing side: the outbox writer signals wake, so the relay
	// claims a message as soon as it is written instead of at its next poll.
	s.wake = store.NewLocalNotifier()
	w := outbox.New(sqlite.DatabaseSQL(), outbox.Config{Notify: s.wake.Signal})
	if err = s.openRelay(ctx, log); err != nil {
		return nil, err
	}
	if err = s.openBilling(ctx, log); err != nil {
		return nil, err
	}
	if err = s.openHTTP(addr, w, log); err != nil {
		return nil, err
	}
	return s, nil
}

// openRelay makes the relay: it claims what the outbox holds, publishes it
// to JetStream and deletes it once the broker acknowledged it.
func (s *service) openRelay(ctx context.Context, log *slog.Logger) error {
	st, err := sqlite.NewStore(ctx, s.db, sqlite.StoreConfig{})
	if err != nil {
		return err
	}
	pub, err := couriernats.NewPublisher(s.nc, couriernats.PublisherConfig{})
	if err != nil {
		return err
	}
	s.relay, err = relay.New(st, pub, relay.Config{Notifier: s.wake, Logger: log})
	return err
}

// openBilling makes the billing consumer: a durable JetStream consumer of
// topic "orders" whose deliveries go through the inbox to bill.
func (s *service) openBilling(ctx context.Context, log *slog.Logger) error {
	const name = "billing" // the inbox's consumer name and the durable consumer's
	ib, err := inbox.New(sqlite.SQLInbox(s.db), name)
	if err != nil {
		return err
	}
	router := inbox.NewRouter[*sql.Tx]()
	inbox.On(router, bill) // OrderPlaced messages, decoded, go to bill
	sub, err := couriernats.NewSubscriber(ctx, s.nc, couriernats.SubscriberConfig{Consumer: name, Topics: []string{"orders"}})
	if err != nil {
		return err
	}
	s.closers = append(s.closers, func() { _ = sub.Close() })
	s.billing, err = inbox.NewConsumer(ib, sub, sqlite.ConsumerStore(s.db), router.Handler(), inbox.ConsumerConfig{Logger: log})
	return err
}

// openHTTP makes the API: POST /orders, for customers with an API key (two
// made up here), each request with an Idempotency-Key.
func (s *service) openHTTP(addr string, w *outbox.Writer[*sql.Tx], log *slog.Logger) error {
	keys, err := idempotency.New(sqlite.SQLIdempotency(s.db), idempotency.Config{
		Scope:  idempotency.ScopeFromContext(customerKey{}), // keys are per customer
		Logger: log,
	})
	if err != nil {
		return err
	}
	s.apiKeys = map[string]string{"ada": rand.Text(), "grace": rand.Text()}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", authenticate(s.apiKeys, keys.Middleware(placeOrder(w, log))))
	s.server = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       time.Minute,
	}
	if s.listener, err = net.Listen("tcp", addr); err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	s.closers = append(s.closers, func() { _ = s.listener.Close() })
	return nil
}

// url is where the API listens.
func (s *service) url() string { return "http://" + s.listener.Addr().String() }

// run serves until ctx ends, then stops gracefully: the HTTP server takes
// no new requests and finishes those in flight, the relay the batches it
// claimed (a message it did not claim stays in the outbox, for the next
// start), the consumer the messages it is applying. It returns once all of
// them stopped, with the first error that stopped one early.
func (s *service) run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { _ = s.wake.Run(ctx); return nil }) // returns when ctx ends
	g.Go(func() error { return s.relay.Run(ctx) })
	g.Go(func() error { return s.billing.Run(ctx) })
	g.Go(func() error { return s.serveHTTP(ctx) })
	return g.Wait()
}

// serveHTTP serves the API until ctx ends, then lets the requests in flight
// finish (5 s at most).
func (s *service) serveHTTP(ctx context.Context) error {
	served := make(chan error, 1)
	go func() { served <- s.server.Serve(s.listener) }()
	select {
	case err := <-served:
		return fmt.Errorf("http: %w", err)
	case <-ctx.Done():
	}
	stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := s.server.Shutdown(stop)
	<-served // http.ErrServerClosed, at once
	return err
}

// close releases what open made, the last made first.
func (s *service) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}
