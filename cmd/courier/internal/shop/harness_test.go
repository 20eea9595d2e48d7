package shop_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/broker/nats/embedded"
	"github.com/courier-go/courier/cmd/courier/internal/shop"
	"github.com/courier-go/courier/idempotency"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store/dburl"
)

// stack is where one test's shop runs: four databases and a broker.
type stack struct {
	name      string
	dbs       shop.Databases
	brokerURL string
	stream    string
	prefix    string
	// nats is the embedded server, nil on an external one; natsDir and
	// natsPort start it again where it was.
	nats     *embedded.Server
	natsDir  string
	natsPort int
}

// onEachStack runs test on SQLite files with an embedded NATS server, and
// on PostgreSQL schemas when COURIER_TEST_POSTGRES_URL is set, with the
// machine's NATS server when COURIER_TEST_NATS_URL is set and an embedded
// one otherwise, as parallel subtests.
func onEachStack(t *testing.T, test func(t *testing.T, st *stack)) {
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); test(t, sqliteStack(t)) })
	t.Run("postgres", func(t *testing.T) { t.Parallel(); test(t, postgresStack(t)) })
}

func sqliteStack(t *testing.T) *stack {
	dir := t.TempDir()
	st := &stack{name: "sqlite", dbs: shop.SQLiteDatabases(dir), natsDir: filepath.Join(dir, "nats")}
	st.startNATS(t)
	st.stream, st.prefix = shop.DefaultStream, shop.DefaultSubjectPrefix
	return st
}

func postgresStack(t *testing.T) *stack {
	base := testenv.Need(t, testenv.EnvPostgres)
	natsURL := testenv.NATSOrEmbedded(t)
	name := testenv.Name("t_")
	dbs, err := shop.PostgresDatabases(base, name)
	testenv.Must(t, err, "databases")
	// Made with the shop's mark, so that Drop drops them.
	testenv.Must(t, dbs.Create(context.Background()), "create schemas")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := dbs.Drop(ctx); err != nil {
			t.Logf("drop schemas: %v", err)
		}
	})
	stream := strings.ToUpper(name)
	return &stack{name: "postgres", dbs: dbs, brokerURL: natsURL, stream: stream, prefix: name + "."}
}

// startNATS starts the embedded server, on the port it had before if any.
func (st *stack) startNATS(t *testing.T) {
	st.nats = testenv.EmbeddedNATSAt(t, st.natsDir, st.natsPort)
	st.brokerURL = st.nats.ClientURL()
	if st.natsPort == 0 {
		_, err := fmt.Sscanf(st.brokerURL[strings.LastIndex(st.brokerURL, ":")+1:], "%d", &st.natsPort)
		testenv.Must(t, err, "nats port")
	}
}

// options returns the shop's options on the stack, with test timings.
func (st *stack) options(t *testing.T) shop.Options {
	return shop.Options{
		Databases: st.dbs, BrokerURL: st.brokerURL, Stream: st.stream, SubjectPrefix: st.prefix,
		Stock: map[string]int{"mug": 10000, "tee": 10000}, DeadlineEvery: 50 * time.Millisecond,
		Timeouts: shop.Timeouts{Step: stepTimeout}, RestartDelay: 50 * time.Millisecond,
		Logger: testLogger(t),
	}
}

// start starts the shop with opts, stopped when the test ends.
func (st *stack) start(t *testing.T, opts shop.Options) *shop.Shop {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := shop.Start(ctx, opts)
	testenv.Must(t, err, "start the shop")
	t.Cleanup(s.Stop)
	return s
}

// testLogger logs warnings and errors into the test's log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tlog struct{ t *testing.T }

func (l tlog) Write(p []byte) (int, error) {
	if os.Getenv("SHOP_TEST_LOGS") != "" {
		l.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

// client talks to the orders API.
type client struct {
	t    *testing.T
	url  string
	http *http.Client
}

func newClient(t *testing.T, s *shop.Shop) *client {
	c := &client{t: t, url: s.URL(), http: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}}
	t.Cleanup(c.http.CloseIdleConnections)
	return c
}

// post sends POST /orders with key and returns the response.
func (c *client) post(key string, body any) (*http.Response, []byte) {
	c.t.Helper()
	data, err := json.Marshal(body)
	testenv.Must(c.t, err, "encode")
	req, err := http.NewRequest(http.MethodPost, c.url+"/orders", bytes.NewReader(data))
	testenv.Must(c.t, err, "request")
	req.Header.Set(idempotency.HeaderKey, key)
	req.Header.Set("Authorization", "Bearer test-client")
	resp, err := c.http.Do(req)
	testenv.Must(c.t, err, "POST /orders")
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	testenv.Must(c.t, err, "read response")
	return resp, out
}

// place places an order and returns its id.
func (c *client) place(key string, o shop.PlaceOrder) string {
	c.t.Helper()
	resp, body := c.post(key, o)
	if resp.StatusCode != http.StatusCreated {
		c.t.Fatalf("POST /orders: %s %s", resp.Status, body)
	}
	var out shop.OrderPlaced
	testenv.Must(c.t, json.Unmarshal(body, &out), "decode")
	return out.ID
}

// get returns GET /orders/{id}.
func (c *client) get(id string) shop.OrderView {
	c.t.Helper()
	resp, err := c.http.Get(c.url + "/orders/" + id)
	testenv.Must(c.t, err, "GET /orders/"+id)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		c.t.Fatalf("GET /orders/%s: %s %s", id, resp.Status, body)
	}
	var v shop.OrderView
	testenv.Must(c.t, json.NewDecoder(resp.Body).Decode(&v), "decode")
	return v
}

// mug is an order for n mugs.
func mug(n int) shop.PlaceOrder {
	return shop.PlaceOrder{Customer: "ada", SKU: "mug", Qty: n, Amount: int64(n) * 1500}
}

// load places n orders concurrently and returns them.
func load(t *testing.T, s *shop.Shop, n int, cfg shop.LoadConfig) shop.LoadResult {
	t.Helper()
	cfg.URL, cfg.Orders = s.URL(), n
	if cfg.SKUs == nil {
		cfg.SKUs = []string{"mug", "tee"}
	}
	l, err := shop.NewLoad(cfg)
	testenv.Must(t, err, "load")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := l.Run(ctx)
	testenv.Must(t, err, "place orders")
	return res
}

// stepTimeout is the sagas' step timeout in the tests. They check that
// every request is answered, so it is far beyond any step's latency on a
// loaded machine (whose steps take many times as long as on a quiet one):
// a request the services lost shows as a saga that never ends, not as a
// cancellation, and a slow machine makes neither.
const stepTimeout = 10 * time.Minute

// settleStall is how long settle waits without progress before it fails.
const settleStall = 30 * time.Second

// demoInFlight bounds a test demo's orders placed and not yet ended. Each
// order waits in the services' queues for about demoInFlight over the
// throughput (Little's law): on a loaded machine (2 orders a second, seen
// beside the other packages' tests under the race detector) a few seconds,
// far below the saga's step timeout, where the demo's default bound (50)
// came near it.
const demoInFlight = 10

// settle waits until every order's saga ended, then audits the databases
// and fails the test if an invariant does not hold.
func (st *stack) settle(t *testing.T) *shop.Audit {
	t.Helper()
	ctx := context.Background()
	db, err := dburl.Open(ctx, st.dbs.Orders, dburl.Options{BarePaths: true, Create: true, CreateSchema: true})
	testenv.Must(t, err, "open the orders database")
	defer db.Close()
	// Progress is an order closing or a saga recording a step; a loaded
	// machine makes the orders slow, not stuck.
	var open, steps int
	testenv.WhileProgressing(t, settleStall, func() (bool, any) {
		err := db.SQL().QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM shop_orders WHERE status = 'open'), (SELECT COUNT(*) FROM courier_saga_history)`).Scan(&open, &steps)
		testenv.Must(t, err, "count open orders")
		return open == 0, [2]int{open, steps}
	}, "%v orders still open", testenv.Lazy(func() any { return open }))
	a, err := shop.AuditShop(ctx, st.dbs)
	testenv.Must(t, err, "audit")
	for _, inv := range a.Invariants {
		if !inv.OK {
			t.Errorf("invariant %q does not hold: %s", inv.Name, inv.Detail)
		}
	}
	return a
}

// publisher sends messages into the shop's broker, as a misbehaving service
// would.
func (st *stack) publish(t *testing.T, msgs ...courier.Message) {
	t.Helper()
	nc := testenv.Connect(t, st.brokerURL)
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: couriernats.Config{SubjectPrefix: st.prefix, KeySubjects: true}})
	testenv.Must(t, err, "publisher")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, err := range pub.Publish(ctx, msgs) {
		testenv.Must(t, err, fmt.Sprintf("publish %s", msgs[i].Type))
	}
	nc.Close()
}

// counter counts rows of a service's database.
func (st *stack) count(t *testing.T, service, query string) int {
	t.Helper()
	db, err := dburl.Open(context.Background(), st.dbs.URL(service), dburl.Options{BarePaths: true, Create: true, CreateSchema: true})
	testenv.Must(t, err, "open "+service)
	defer db.Close()
	var n int
	testenv.Must(t, db.SQL().QueryRow(query).Scan(&n), query)
	return n
}
