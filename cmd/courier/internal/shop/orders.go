package shop

import (
	"context"
	"database/sql"
	"errors"
	"maps"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/idempotency"
	"github.com/courier-go/courier/saga"
	"github.com/courier-go/courier/store"
)

// OrdersConfig configures the orders service.
type OrdersConfig struct {
	Config
	// HTTPAddr is where instance 0's HTTP API listens. Default
	// 127.0.0.1:8080; with port 0 the first Run picks a free port and later
	// Runs reuse it. Other instances listen on a free port of the same host,
	// each its own (see InstanceURL), kept across their restarts.
	HTTPAddr string
	// Timeouts bound the saga's waits.
	Timeouts Timeouts
	// DeadlineEvery is how often passed deadlines are fired. Default 500ms.
	DeadlineEvery time.Duration
	// KeyLockTimeout is how long a POST holds its Idempotency-Key: a retry
	// of a request whose server crashed gets 409 until then. Default 5s.
	KeyLockTimeout time.Duration
}

// OrdersService is the saga orchestrator and the shop's HTTP API:
//
//	POST /orders      {"customer","sku","qty","amount"} with an Idempotency-Key and an Authorization → 201 {"id","state"}
//	GET  /orders/{id} the order, its saga state, phase, reason and history
//
// A POST creates the order row and starts its saga in the transaction of the
// request's Idempotency-Key. Keys are kept per client: per the credentials
// in its Authorization header (idempotency.ScopeFromHeader), so that a
// client never gets another's order back for a key they both chose; a POST
// without them is answered 401. The shop checks no credentials itself (a
// gateway in front of it would); an API with authentication of its own
// scopes keys by the principal it found (idempotency.ScopeFromContext).
// Replies from the other services arrive through the inbox and move the
// saga in the inbox's transaction.
type OrdersService struct {
	*base
	cfg OrdersConfig

	addrMu  sync.Mutex
	addrs   map[int]string // by instance, once it listened
	serving map[int]bool   // instances whose API is up
}

var _ Service = (*OrdersService)(nil)

// NewOrders returns the orders service.
func NewOrders(cfg OrdersConfig) (*OrdersService, error) {
	b, err := newBase(Orders, cfg.Config)
	if err != nil {
		return nil, err
	}
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = "127.0.0.1:8080"
	}
	if cfg.DeadlineEvery <= 0 {
		cfg.DeadlineEvery = 500 * time.Millisecond
	}
	if cfg.KeyLockTimeout <= 0 {
		cfg.KeyLockTimeout = 5 * time.Second
	}
	o := &OrdersService{base: b, cfg: cfg, addrs: map[int]string{}, serving: map[int]bool{}}
	b.spec = spec{tables: ordersTables, topic: TopicOrders, setup: o.setup}
	return o, nil
}

// Addr returns the address instance 0's HTTP API listens on (the one it
// will listen on again after a restart).
func (o *OrdersService) Addr() string { return o.instanceAddr(0) }

// URL returns instance 0's HTTP API's base URL, http://host:port.
func (o *OrdersService) URL() string { return o.InstanceURL(0) }

// InstanceURL returns instance i's HTTP API's base URL.
func (o *OrdersService) InstanceURL(i int) string { return "http://" + o.instanceAddr(i) }

// URLs returns the base URLs of the instances whose HTTP API is up, by
// instance number: what a load balancer in front of them spreads the
// requests over.
func (o *OrdersService) URLs() []string {
	o.addrMu.Lock()
	defer o.addrMu.Unlock()
	var urls []string
	for _, i := range slices.Sorted(maps.Keys(o.serving)) {
		urls = append(urls, "http://"+o.addrs[i])
	}
	return urls
}

// instanceAddr returns where instance i listens, or will: HTTPAddr for
// instance 0, a free port of its host for the others.
func (o *OrdersService) instanceAddr(i int) string {
	o.addrMu.Lock()
	defer o.addrMu.Unlock()
	if a, ok := o.addrs[i]; ok {
		return a
	}
	if i == 0 {
		return o.cfg.HTTPAddr
	}
	host, _, err := net.SplitHostPort(o.cfg.HTTPAddr)
	if err != nil {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, "0")
}

// setServing records whether instance i's API serves on addr.
func (o *OrdersService) setServing(i int, addr string, up bool) {
	o.addrMu.Lock()
	defer o.addrMu.Unlock()
	o.addrs[i] = addr
	if up {
		o.serving[i] = true
	} else {
		delete(o.serving, i)
	}
}

// ordersNode is one incarnation of the orders service.
type ordersNode struct {
	*node
	orch   *saga.Orchestrator[orderData, *sql.Tx]
	sagas  store.Sagas[*sql.Tx]
	status map[string]string // terminal saga state → order status
}

func (o *OrdersService) setup(_ context.Context, n *node, drain time.Duration) (incarnation, error) {
	sagas := n.db.Sagas()
	version := o.ChargeVersion()
	orch, err := saga.New(orderSaga(o.cfg.Timeouts, version), sagas, n.w, saga.Config{Logger: n.log})
	if err != nil {
		return incarnation{}, err
	}
	keys, err := idempotency.New(n.db.Idempotency(), idempotency.Config{
		Scope: idempotency.ScopeFromHeader("Authorization"), LockTimeout: o.cfg.KeyLockTimeout, Logger: n.log,
	})
	if err != nil {
		return incarnation{}, err
	}
	on := &ordersNode{node: n, orch: orch, sagas: sagas,
		status: map[string]string{StateShippingReady: StatusCompleted, StateCancelled: StatusCancelled}}
	ln, err := net.Listen("tcp", o.instanceAddr(n.instance))
	if err != nil {
		return incarnation{}, err
	}
	addr := ln.Addr().String()
	o.setServing(n.instance, addr, false)
	n.log.Info("orders API listening", "url", "http://"+addr, "charge_version", version)
	return incarnation{
		handler: on.apply,
		extra: []func(context.Context) error{
			func(ctx context.Context) error { return orch.Run(ctx, o.cfg.DeadlineEvery) },
			func(ctx context.Context) error {
				o.setServing(n.instance, addr, true)
				defer o.setServing(n.instance, addr, false)
				return serve(ctx, ln, on.routes(keys), drain)
			},
		},
	}, nil
}

// Order statuses in the orders table: the saga's outcome, for queries that
// need no saga store.
const (
	StatusOpen      = "open"
	StatusCompleted = "completed"
	StatusCancelled = "cancelled"
)

// apply moves the saga with a reply, in the inbox's transaction. When the
// saga ends, the order row records how. saga.ErrConflict (another
// transition won) is returned, so the inbox delivers the reply again.
func (on *ordersNode) apply(ctx context.Context, tx *sql.Tx, msg courier.Message) error {
	out, err := on.orch.Handle(ctx, tx, msg)
	if err != nil {
		return err
	}
	status, ended := on.status[out.To]
	if !out.Applied || !ended {
		return nil
	}
	rec, err := on.sagas.Load(ctx, tx, sagaType, msg.Key)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, on.db.q(`UPDATE shop_orders SET status = ?, reason = ?, finished_at = ? WHERE id = ?`),
		status, rec.Reason, time.Now().UnixMicro(), msg.Key)
	return err
}

// serve runs an HTTP server on ln until ctx ends. With a drain of more than
// crashDrain it shuts down gracefully; otherwise it drops every connection
// at once, as a crashing process would. It returns once every handler
// returned.
func serve(ctx context.Context, ln net.Listener, h http.Handler, drain time.Duration) error {
	var inflight sync.WaitGroup
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			inflight.Add(1)
			defer inflight.Done()
			h.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		inflight.Wait()
		return err
	case <-ctx.Done():
	}
	if drain > crashDrain {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drain)
		_ = srv.Shutdown(sctx)
		cancel()
	}
	_ = srv.Close()
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	inflight.Wait()
	return nil
}
