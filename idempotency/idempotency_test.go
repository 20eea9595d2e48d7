package idempotency_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/idempotency"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/memstore"
)

// shop is the entry point of seed exercise A: POST /orders creates an order
// and its OrderPlaced message in the key's transaction.
type shop[TTx any] struct {
	t      *testing.T
	db     *database[TTx]
	runs   atomic.Int32
	claims claims // the key store's
	server *httptest.Server
	hold   chan struct{} // when set, handlers wait on it
	fail   atomic.Int32  // next handlers answer 503 this many times
}

func newShop[TTx any](t *testing.T, d dialect[TTx], cfg idempotency.Config) *shop[TTx] {
	s := &shop[TTx]{t: t, db: d.open(t)}
	if cfg.Scope == nil {
		cfg.Scope = func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil }
	}
	keys, err := idempotency.New(countClaims[TTx]{s.db.keys, &s.claims}, cfg)
	testenv.Must(t, err, "keys")
	w := outbox.New(s.db.outbox, outbox.Config{})
	mux := http.NewServeMux()
	mux.Handle("POST /orders", keys.Middleware(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		s.runs.Add(1)
		if s.hold != nil {
			<-s.hold
		}
		tx, ok := idempotency.Tx[TTx](r.Context())
		if !ok {
			http.Error(rw, "no transaction", 500)
			return
		}
		var in struct{ Item string }
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Item == "" {
			rw.Header().Set("Content-Type", "text/plain")
			rw.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(rw, "item required")
			return
		}
		id, err := s.db.insertOrder(r.Context(), tx, in.Item)
		if err != nil {
			http.Error(rw, err.Error(), 500)
			return
		}
		msg, _ := courier.NewJSON("orders", fmt.Sprint(id), map[string]any{"id": id, "item": in.Item}, courier.WithType("OrderPlaced"))
		if err := w.Write(r.Context(), tx, msg); err != nil {
			http.Error(rw, err.Error(), 500)
			return
		}
		if s.fail.Load() > 0 {
			s.fail.Add(-1)
			http.Error(rw, "payment gateway down", http.StatusServiceUnavailable)
			return
		}
		rw.Header().Set("Content-Type", "application/json")
		rw.Header().Set("Location", fmt.Sprintf("/orders/%d", id))
		rw.Header().Set("X-Request-Only", "not replayed")
		rw.WriteHeader(http.StatusCreated)
		fmt.Fprintf(rw, `{"id":%d,"item":%q,"at":%q}`, id, in.Item, time.Now().Format(time.RFC3339Nano))
	})))
	s.server = httptest.NewServer(mux)
	t.Cleanup(s.server.Close)
	return s
}

// claims counts a key store's Claim calls.
type claims struct{ begun, ended atomic.Int32 }

// countClaims is a key store that counts its claims.
type countClaims[TTx any] struct {
	store.Idempotency[TTx]
	n *claims
}

func (c countClaims[TTx]) Claim(ctx context.Context, kc store.KeyClaim) (store.KeyRecord, bool, error) {
	c.n.begun.Add(1)
	defer c.n.ended.Add(1)
	return c.Idempotency.Claim(ctx, kc)
}

// doOnly is the Config.Scope of tests that call Do, whose Request carries
// the scope; the middleware, which would use it, does not run.
var doOnly = idempotency.OneScopeForAllClients

type reply struct {
	status int
	header http.Header
	body   string
}

func (s *shop[TTx]) post(key, user, body string) reply {
	s.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.server.URL+"/orders", strings.NewReader(body))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	req.Header.Set("X-User", user)
	resp, err := http.DefaultClient.Do(req)
	testenv.Must(s.t, err, "post")
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}
}

func (s *shop[TTx]) count(table string) int {
	s.t.Helper()
	return s.db.count(s.t, table)
}

func TestSameKeyTwiceOneOrder(t *testing.T) {
	onEachDialect(t, testSameKeyTwiceOneOrder, testSameKeyTwiceOneOrder)
}

func testSameKeyTwiceOneOrder[TTx any](t *testing.T, d dialect[TTx]) {
	s := newShop(t, d, idempotency.Config{})
	first := s.post(`"order-a-1"`, "alice", `{"item":"coffee"}`)
	second := s.post(`order-a-1`, "alice", `{"item":"coffee"}`) // bare form: the same key
	if first.status != 201 || second.status != 201 {
		t.Fatalf("statuses %d, %d: %s %s", first.status, second.status, first.body, second.body)
	}
	if second.body != first.body || second.header.Get("Location") != first.header.Get("Location") ||
		second.header.Get("Content-Type") != "application/json" {
		t.Fatalf("replay differs:\n%+v\n%+v", first, second)
	}
	if second.header.Get("Idempotent-Replayed") != "true" || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatal("Idempotent-Replayed header wrong")
	}
	if second.header.Get("X-Request-Only") != "" || first.header.Get("X-Request-Only") == "" {
		t.Fatal("only the chosen headers are replayed; the first response has them all")
	}
	if s.runs.Load() != 1 || s.count("orders") != 1 || s.count("courier_outbox") != 1 {
		t.Fatalf("handler ran %d times; %d orders, %d messages; want one of each", s.runs.Load(), s.count("orders"), s.count("courier_outbox"))
	}
	// Another user's identical key is another operation.
	if r := s.post(`"order-a-1"`, "bob", `{"item":"coffee"}`); r.status != 201 || r.header.Get("Idempotent-Replayed") != "" || s.count("orders") != 2 {
		t.Fatalf("scoped key: %+v, %d orders", r, s.count("orders"))
	}
}

func TestFiftyConcurrentRequestsOneExecution(t *testing.T) {
	onEachDialect(t, testFiftyConcurrentRequestsOneExecution, testFiftyConcurrentRequestsOneExecution)
}

func testFiftyConcurrentRequestsOneExecution[TTx any](t *testing.T, d dialect[TTx]) {
	s := newShop(t, d, idempotency.Config{})
	s.hold = make(chan struct{})
	var wg sync.WaitGroup
	replies := make([]reply, 50)
	for i := range replies {
		wg.Go(func() { replies[i] = s.post("same-key", "carol", `{"item":"tea"}`) })
	}
	// The others find the key claimed while the first is held (on SQLite
	// they wait for its transaction's write lock).
	testenv.Eventually(t, 10*time.Second, func() bool {
		return s.runs.Load() == 1 && s.claims.begun.Load() == 50 && (s.claims.ended.Load() == 50 || d.name == "sqlite")
	}, "%v claims begun, %v ended, %v handlers ran", testenv.Lazy(func() any { return s.claims.begun.Load() }),
		testenv.Lazy(func() any { return s.claims.ended.Load() }), testenv.Lazy(func() any { return s.runs.Load() }))
	close(s.hold)
	wg.Wait()
	created, replayed, conflicts := 0, 0, 0
	var body string
	for _, r := range replies {
		switch {
		case r.status == 201 && r.header.Get("Idempotent-Replayed") == "true":
			replayed++
			if body != "" && r.body != body {
				t.Fatal("replays differ")
			}
			body = r.body
		case r.status == 201:
			created++
		case r.status == 409 && r.header.Get("Content-Type") == "application/problem+json":
			if after, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || after < 1 || after > 10 {
				t.Fatalf("409 with Retry-After %q; want 1 to 10 seconds", r.header.Get("Retry-After"))
			}
			conflicts++
		default:
			t.Fatalf("unexpected reply %+v", r)
		}
	}
	if created != 1 || s.runs.Load() != 1 || s.count("orders") != 1 {
		t.Fatalf("%d created, handler ran %d times, %d orders; want exactly one", created, s.runs.Load(), s.count("orders"))
	}
	t.Logf("50 concurrent requests: 1 executed, %d conflicts (409), %d replays", conflicts, replayed)
}

func TestRejectionsStoreNothing(t *testing.T) {
	onEachDialect(t, testRejectionsStoreNothing, testRejectionsStoreNothing)
}

func testRejectionsStoreNothing[TTx any](t *testing.T, d dialect[TTx]) {
	s := newShop(t, d, idempotency.Config{MaxBodyBytes: 64})
	cases := []struct {
		key, body string
		status    int
		problem   string
	}{
		{"", `{"item":"x"}`, 400, "idempotency-key-missing"},
		{`"unterminated`, `{"item":"x"}`, 400, "idempotency-key-invalid"},
		{strings.Repeat("k", 256), `{"item":"x"}`, 400, "idempotency-key-invalid"},
		{"big", `{"item":"` + strings.Repeat("x", 100) + `"}`, 413, "body-too-large"},
	}
	for _, c := range cases {
		r := s.post(c.key, "dave", c.body)
		var p map[string]any
		_ = json.Unmarshal([]byte(r.body), &p)
		if r.status != c.status || r.header.Get("Content-Type") != "application/problem+json" ||
			p["type"] != idempotency.ProblemTypes+"#"+c.problem || p["detail"] == "" || int(p["status"].(float64)) != c.status {
			t.Errorf("key %.20q: %d %s", c.key, r.status, r.body)
		}
	}
	if s.runs.Load() != 0 || s.count("courier_idempotency_keys") != 0 {
		t.Fatalf("rejected requests ran the handler %d times and stored %d keys", s.runs.Load(), s.count("courier_idempotency_keys"))
	}
}

func TestMismatchIs422(t *testing.T) {
	onEachDialect(t, testMismatchIs422, testMismatchIs422)
}

func testMismatchIs422[TTx any](t *testing.T, d dialect[TTx]) {
	s := newShop(t, d, idempotency.Config{})
	if r := s.post("k1", "erin", `{"item":"cake"}`); r.status != 201 {
		t.Fatal(r)
	}
	r := s.post("k1", "erin", `{"item":"pie"}`)
	if r.status != 422 || !strings.Contains(r.body, "idempotency-key-reused") || s.runs.Load() != 1 {
		t.Fatalf("reused key: %d %s, handler ran %d times", r.status, r.body, s.runs.Load())
	}
}

func TestStoredAndUnstoredOutcomes(t *testing.T) {
	onEachDialect(t, testStoredAndUnstoredOutcomes, testStoredAndUnstoredOutcomes)
}

func testStoredAndUnstoredOutcomes[TTx any](t *testing.T, d dialect[TTx]) {
	s := newShop(t, d, idempotency.Config{})
	// A 4xx from the handler is an answer: stored and replayed.
	if r := s.post("k4", "fay", `{}`); r.status != 400 {
		t.Fatal(r)
	}
	if r := s.post("k4", "fay", `{}`); r.status != 400 || r.header.Get("Idempotent-Replayed") != "true" || r.body != "item required" {
		t.Fatalf("4xx not replayed: %+v", r)
	}
	// A 5xx is not: its transaction rolls back, the key is released, a retry runs.
	s.fail.Store(1)
	if r := s.post("k5", "fay", `{"item":"bread"}`); r.status != 503 {
		t.Fatal(r)
	}
	if s.count("orders") != 0 || s.count("courier_outbox") != 0 {
		t.Fatal("a 503 left its business change behind")
	}
	if r := s.post("k5", "fay", `{"item":"bread"}`); r.status != 201 || r.header.Get("Idempotent-Replayed") != "" || s.count("orders") != 1 {
		t.Fatalf("retry after 503: %+v, %d orders", r, s.count("orders"))
	}
}

func TestPanicReleasesKey(t *testing.T) {
	onEachDialect(t, testPanicReleasesKey, testPanicReleasesKey)
}

func testPanicReleasesKey[TTx any](t *testing.T, d dialect[TTx]) {
	keys, err := idempotency.New(d.open(t).keys, idempotency.Config{Scope: doOnly})
	testenv.Must(t, err, "keys")
	req := idempotency.Request{Key: "p", Fingerprint: idempotency.Fingerprint("POST", "/x", nil)}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic swallowed")
			}
		}()
		_, _ = keys.Do(context.Background(), req, func(ctx context.Context, tx TTx) (idempotency.Response, error) {
			panic("boom")
		})
	}()
	out, err := keys.Do(context.Background(), req, func(ctx context.Context, tx TTx) (idempotency.Response, error) {
		return idempotency.Response{Status: 200, Body: []byte("ok")}, nil
	})
	if err != nil || out.Replayed || string(out.Response.Body) != "ok" {
		t.Fatalf("after a panic: %+v, %v", out, err)
	}
}

// The first attempt's process dies mid-handler: its key stays in flight until
// the lock times out, then the retry runs and succeeds, once. The key store's
// clock is the test's, moved past the lock's end instead of sleeping.
func TestCrashedOwnerIsTakenOver(t *testing.T) {
	onEachDialect(t, testCrashedOwnerIsTakenOver, testCrashedOwnerIsTakenOver)
}

func testCrashedOwnerIsTakenOver[TTx any](t *testing.T, d dialect[TTx]) {
	clock := memstore.NewClock()
	clock.Set(time.Now())
	db := d.openAt(t, clock.Now)
	keys, err := idempotency.New(db.keys, idempotency.Config{Scope: doOnly, LockTimeout: time.Second, Clock: clock.Now})
	testenv.Must(t, err, "keys")
	ctx := context.Background()
	req := idempotency.Request{Key: "crash", Fingerprint: idempotency.Fingerprint("POST", "/orders", []byte("x"))}
	// A crash leaves exactly this behind: a claimed, uncompleted key (the
	// business transaction died with the process).
	rec, mine, err := db.keys.Claim(ctx, claimFor(req, time.Second))
	if err != nil || !mine || rec.Done {
		t.Fatalf("claim: %+v %v %v", rec, mine, err)
	}
	ran := 0
	run := func(ctx context.Context, tx TTx) (idempotency.Response, error) {
		ran++
		return idempotency.Response{Status: 201, Body: []byte("created")}, nil
	}
	if _, err := keys.Do(ctx, req, run); err == nil {
		t.Fatal("a retry during the dead owner's lock ran")
	} else if _, ok := err.(*idempotency.InFlightError); !ok {
		t.Fatalf("retry during the lock: %v, want InFlightError", err)
	}
	clock.Advance(time.Second)
	out, err := keys.Do(ctx, req, run)
	if err != nil || out.Replayed || ran != 1 {
		t.Fatalf("after the lock: %+v %v, ran %d", out, err, ran)
	}
	out, err = keys.Do(ctx, req, run)
	if err != nil || !out.Replayed || ran != 1 {
		t.Fatalf("then: %+v %v, ran %d", out, err, ran)
	}
}

// A key past its retention runs anew, and Cleanup removes expired keys; the
// key store's clock is the test's.
func TestExpiredKeyRunsAgain(t *testing.T) {
	onEachDialect(t, testExpiredKeyRunsAgain, testExpiredKeyRunsAgain)
}

func testExpiredKeyRunsAgain[TTx any](t *testing.T, d dialect[TTx]) {
	clock := memstore.NewClock()
	clock.Set(time.Now())
	keys, err := idempotency.New(d.openAt(t, clock.Now).keys, idempotency.Config{Scope: doOnly, LockTimeout: time.Second, Retention: time.Second, Clock: clock.Now})
	testenv.Must(t, err, "keys")
	ctx := context.Background()
	req := idempotency.Request{Key: "old", Fingerprint: idempotency.Fingerprint("POST", "/orders", nil)}
	ran := 0
	run := func(ctx context.Context, tx TTx) (idempotency.Response, error) {
		ran++
		return idempotency.Response{Status: 200}, nil
	}
	_, _ = keys.Do(ctx, req, run)
	if out, _ := keys.Do(ctx, req, run); !out.Replayed {
		t.Fatal("not replayed within retention")
	}
	clock.Advance(time.Second)
	if out, err := keys.Do(ctx, req, run); err != nil || out.Replayed || ran != 2 {
		t.Fatalf("after expiry: %+v %v, ran %d; want a new execution", out, err, ran)
	}
	clock.Advance(time.Second)
	if n, err := keys.Cleanup(ctx); err != nil || n != 1 {
		t.Fatalf("cleanup removed %d, %v; want the expired key", n, err)
	}
}

// A handler that writes, then meets an error (one of its statements fails,
// or it finds the request invalid) and answers 4xx: every dialect stores
// and replays that answer, and none commits the handler's writes, even
// though PostgreSQL has aborted the transaction by then and SQLite and
// MySQL have not.
func TestClientErrorStoresAnswerNotWrites(t *testing.T) {
	onEachDialect(t, testClientErrorStoresAnswerNotWrites, testClientErrorStoresAnswerNotWrites)
}

func testClientErrorStoresAnswerNotWrites[TTx any](t *testing.T, d dialect[TTx]) {
	db := d.open(t)
	keys, err := idempotency.New(db.keys, idempotency.Config{Scope: idempotency.ScopeFromHeader("Authorization")})
	testenv.Must(t, err, "keys")
	w := outbox.New(db.outbox, outbox.Config{})
	var runs atomic.Int32
	h := keys.Middleware(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		ctx := r.Context()
		tx, _ := idempotency.Tx[TTx](ctx)
		id, err := db.insertOrder(ctx, tx, "coffee")
		if err != nil {
			http.Error(rw, err.Error(), 500)
			return
		}
		msg, _ := courier.NewJSON("orders", fmt.Sprint(id), map[string]any{"id": id}, courier.WithType("OrderPlaced"))
		if err := w.Write(ctx, tx, msg); err != nil {
			http.Error(rw, err.Error(), 500)
			return
		}
		if r.URL.Query().Get("fail") == "statement" {
			if err := db.exec(ctx, tx, "INSERT INTO orders (item) VALUES (NULL)"); err == nil {
				http.Error(rw, "an order without an item was accepted", 500)
				return
			}
		}
		http.Error(rw, "coffee is sold out", http.StatusConflict)
	}))
	post := func(key, target string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, target, strings.NewReader(`{"item":"coffee"}`))
		req.Header.Set(idempotency.HeaderKey, key)
		req.Header.Set("Authorization", "Bearer test-client")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	for i, target := range []string{"/orders?fail=statement", "/orders"} {
		key := fmt.Sprint("k", i)
		first := post(key, target)
		if first.Code != http.StatusConflict || first.Body.String() != "coffee is sold out\n" {
			t.Fatalf("%s: %d %q; want the handler's 409", target, first.Code, first.Body)
		}
		if n, m := db.count(t, "orders"), db.count(t, "courier_outbox"); n != 0 || m != 0 {
			t.Fatalf("%s: a 409 committed %d orders and %d messages; want none", target, n, m)
		}
		again := post(key, target)
		if again.Code != http.StatusConflict || again.Body.String() != first.Body.String() || again.Header().Get(idempotency.HeaderReplayed) != "true" {
			t.Fatalf("%s: retry got %d %q (replayed %q); want the stored 409", target, again.Code, again.Body, again.Header().Get(idempotency.HeaderReplayed))
		}
		if runs.Load() != int32(i+1) {
			t.Fatalf("%s: the handler ran %d times", target, runs.Load())
		}
	}
}

// A request that finds its key in flight is told to come back soon: after
// about as long as the other attempt has run so far, between 1 and 10
// seconds, and never later than that attempt's lock ends; not after the
// whole lock, which a client that obeys would wait out for nothing. The
// key store and the Keys share a clock the test holds, years away from the
// real time, so each answer is exact.
func TestInFlightRetryAfterIsShort(t *testing.T) {
	onEachDialect(t, testInFlightRetryAfterIsShort, testInFlightRetryAfterIsShort)
}

func testInFlightRetryAfterIsShort[TTx any](t *testing.T, d dialect[TTx]) {
	clock := memstore.NewClock()
	clock.Set(time.Date(2031, 7, 8, 9, 10, 11, 0, time.UTC))
	db := d.openAt(t, clock.Now)
	ctx := context.Background()
	run := func(ctx context.Context, tx TTx) (idempotency.Response, error) {
		t.Fatal("the handler ran while its key was in flight")
		return idempotency.Response{}, nil
	}
	cases := []struct {
		name        string
		lockTimeout time.Duration // this process's
		lockFor     time.Duration // the claim in flight's
		ran         time.Duration // how long the claim has been in flight
		retryAfter  time.Duration
	}{
		// The request in flight has just started (its lock is whole).
		{"just started", time.Minute, time.Minute, 0, time.Second},
		// It has run 4 seconds: as long again.
		{"running", time.Minute, time.Minute, 4 * time.Second, 4 * time.Second},
		// It has run 59 minutes of a one-hour lock: 10 seconds at most.
		{"long running", time.Hour, time.Hour, 59 * time.Minute, 10 * time.Second},
		// Its lock ends in 3 seconds: not later than that.
		{"lock ends soon", time.Hour, time.Minute, 57 * time.Second, 3 * time.Second},
	}
	for i, c := range cases {
		keys, err := idempotency.New(db.keys, idempotency.Config{Scope: doOnly, LockTimeout: c.lockTimeout, Retention: 2 * time.Hour, Clock: clock.Now})
		testenv.Must(t, err, "keys")
		req := idempotency.Request{Key: fmt.Sprint("busy-", i), Fingerprint: idempotency.Fingerprint("POST", "/orders", nil)}
		if _, mine, err := db.keys.Claim(ctx, claimFor(req, c.lockFor)); err != nil || !mine {
			t.Fatalf("%s: claim: %v, mine %v", c.name, err, mine)
		}
		clock.Advance(c.ran)
		_, err = keys.Do(ctx, req, run)
		var inFlight *idempotency.InFlightError
		if !errors.As(err, &inFlight) {
			t.Fatalf("%s: %v; want an InFlightError", c.name, err)
		}
		if left := c.lockFor - c.ran; inFlight.RetryAfter != c.retryAfter || inFlight.LockedFor != left {
			t.Errorf("%s: RetryAfter %s, LockedFor %s; want %s and %s",
				c.name, inFlight.RetryAfter, inFlight.LockedFor, c.retryAfter, left)
		}
	}
}

// On SQLite, idempotent requests run one at a time, unrelated keys
// included: the handler's transaction holds the database's write lock (the
// package documentation says so; this keeps it true).
func TestSQLiteRunsRequestsOneAtATime(t *testing.T) {
	s := newShop(t, sqliteDialect(), idempotency.Config{})
	s.hold = make(chan struct{})
	first := make(chan reply)
	go func() { first <- s.post("first", "gus", `{"item":"tea"}`) }()
	testenv.Eventually(t, 10*time.Second, func() bool { return s.runs.Load() == 1 }, "the first handler did not start")
	second := make(chan reply)
	go func() { second <- s.post("second", "hal", `{"item":"cake"}`) }()
	time.Sleep(200 * time.Millisecond) // the second request arrives meanwhile
	if n := s.runs.Load(); n != 1 {
		t.Fatalf("%d handlers ran while the first held its transaction; want the second to wait", n)
	}
	close(s.hold)
	if a, b := <-first, <-second; a.status != 201 || b.status != 201 || s.runs.Load() != 2 {
		t.Fatalf("after the first: %d, %d, %d handler runs; want both created", a.status, b.status, s.runs.Load())
	}
}
