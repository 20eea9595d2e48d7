package idempotency_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/courier-go/courier/idempotency"
	"github.com/courier-go/courier/internal/testenv"
)

// Keys are never shared among clients by default: New refuses a Config
// without a Scope, naming the field and the helpers that fill it.
func TestScopeIsRequired(t *testing.T) {
	_, err := idempotency.New(sqliteDialect().open(t).keys, idempotency.Config{})
	if err == nil || !strings.Contains(err.Error(), "Config.Scope is nil") || !strings.Contains(err.Error(), "ScopeFromContext") ||
		!strings.Contains(err.Error(), "OneScopeForAllClients") {
		t.Fatalf("New without a Scope: %v; want an error naming Config.Scope and the helpers", err)
	}
}

// principalKey is where the test's authentication puts the principal.
type principalKey struct{}

// Two clients that send the same key, path and body are two operations:
// neither gets the other's stored response (which may hold personal data
// or a Location), and neither can block the other's key. The same client
// retrying gets its own response back. A request without a principal is
// refused with 401 and stores nothing.
func TestScopesKeepClientsApart(t *testing.T) {
	for _, c := range []struct {
		name  string
		scope func(*http.Request) (string, error)
		as    func(r *http.Request, who string)
	}{
		{"ScopeFromHeader", idempotency.ScopeFromHeader("Authorization"), func(r *http.Request, who string) {
			if who != "" {
				r.Header.Set("Authorization", "Bearer token-of-"+who)
			}
		}},
		{"ScopeFromContext", idempotency.ScopeFromContext(principalKey{}), func(r *http.Request, who string) {
			if who != "" {
				*r = *r.WithContext(context.WithValue(r.Context(), principalKey{}, who))
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := sqliteDialect().open(t)
			keys, err := idempotency.New(db.keys, idempotency.Config{Scope: c.scope})
			testenv.Must(t, err, "keys")
			var runs atomic.Int32
			h := keys.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := runs.Add(1)
				w.Header().Set("Location", "/orders/"+string(rune('0'+n)))
				w.WriteHeader(http.StatusCreated)
				_, _ = w.Write([]byte(`{"order":` + string(rune('0'+n)) + `,"address":"private"}`))
			}))
			post := func(who string) *httptest.ResponseRecorder {
				req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"item":"tea"}`))
				req.Header.Set(idempotency.HeaderKey, "checkout-1")
				c.as(req, who)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				return rec
			}
			alice := post("alice")
			bob := post("bob")
			if alice.Code != 201 || bob.Code != 201 || bob.Header().Get(idempotency.HeaderReplayed) != "" ||
				bob.Body.String() == alice.Body.String() || runs.Load() != 2 {
				t.Fatalf("bob got %d %q (replayed %q) after alice's %q; want an operation of his own",
					bob.Code, bob.Body, bob.Header().Get(idempotency.HeaderReplayed), alice.Body)
			}
			again := post("alice")
			if again.Code != 201 || again.Header().Get(idempotency.HeaderReplayed) != "true" || again.Body.String() != alice.Body.String() {
				t.Fatalf("alice's retry: %d %q; want her stored response", again.Code, again.Body)
			}
			nobody := post("")
			var p map[string]any
			_ = json.Unmarshal(nobody.Body.Bytes(), &p)
			if nobody.Code != http.StatusUnauthorized || p["type"] != idempotency.ProblemTypes+"#idempotency-principal-missing" || runs.Load() != 2 {
				t.Fatalf("no principal: %d %s; want 401 idempotency-principal-missing and no run", nobody.Code, nobody.Body)
			}
			if n := db.count(t, "courier_idempotency_keys"); n != 2 {
				t.Fatalf("%d keys stored; want alice's and bob's", n)
			}
			var leaked int
			testenv.Must(t, db.sql.QueryRow(`SELECT COUNT(*) FROM courier_idempotency_keys WHERE scope LIKE '%token%'`).Scan(&leaked), "scopes")
			if leaked != 0 {
				t.Fatal("a stored scope holds the client's credential")
			}
		})
	}
}

// OneScopeForAllClients shares every key among all clients, as its name
// says: the second client gets the first one's response.
func TestOneScopeForAllClientsShares(t *testing.T) {
	keys, err := idempotency.New(sqliteDialect().open(t).keys, idempotency.Config{Scope: idempotency.OneScopeForAllClients})
	testenv.Must(t, err, "keys")
	h := keys.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) }))
	for i, want := range []string{"", "true"} {
		req := httptest.NewRequest(http.MethodPost, "/orders", nil)
		req.Header.Set(idempotency.HeaderKey, "k")
		req.Header.Set("Authorization", "Bearer client-"+string(rune('a'+i)))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Header().Get(idempotency.HeaderReplayed) != want {
			t.Fatalf("client %d: replayed %q, want %q", i, rec.Header().Get(idempotency.HeaderReplayed), want)
		}
	}
}

// A response over Config.MaxResponseBytes is not stored: the handler's
// writes are rolled back, the key is released, the client gets a 500
// response-too-large problem (never a truncated body), and the middleware
// buffers no more than the limit however much the handler writes.
func TestResponseOverTheLimitIsNotStored(t *testing.T) {
	onEachDialect(t, testResponseOverTheLimitIsNotStored, testResponseOverTheLimitIsNotStored)
}

func testResponseOverTheLimitIsNotStored[TTx any](t *testing.T, d dialect[TTx]) {
	db := d.open(t)
	const limit = 4 << 10
	keys, err := idempotency.New(db.keys, idempotency.Config{Scope: idempotency.ScopeFromHeader("Authorization"), MaxResponseBytes: limit})
	testenv.Must(t, err, "keys")
	var runs, accepted atomic.Int64
	h := keys.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		tx, _ := idempotency.Tx[TTx](r.Context())
		if _, err := db.insertOrder(r.Context(), tx, "report"); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		w.WriteHeader(http.StatusOK)
		chunk := []byte(strings.Repeat("x", 1<<10))
		for range 10 << 10 { // 10 MiB, if nothing stops it
			n, err := w.Write(chunk)
			accepted.Add(int64(n))
			if err != nil {
				return
			}
		}
	}))
	post := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/reports", strings.NewReader(`{}`))
		req.Header.Set(idempotency.HeaderKey, "big")
		req.Header.Set("Authorization", "Bearer reporter")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	for i := 1; i <= 2; i++ {
		rec := post()
		var p map[string]any
		_ = json.Unmarshal(rec.Body.Bytes(), &p)
		if rec.Code != http.StatusInternalServerError || p["type"] != idempotency.ProblemTypes+"#response-too-large" {
			t.Fatalf("attempt %d: %d %.200s; want 500 response-too-large", i, rec.Code, rec.Body)
		}
		if runs.Load() != int64(i) {
			t.Fatalf("attempt %d ran the handler %d times: the key was not released", i, runs.Load())
		}
	}
	if got := accepted.Load(); got > 2*(limit+1) {
		t.Fatalf("the middleware took %d bytes over two attempts; want at most the limit (%d) each", got, limit)
	}
	if n, k := db.count(t, "orders"), db.count(t, "courier_idempotency_keys"); n != 0 || k != 0 {
		t.Fatalf("%d orders and %d keys stored; want none", n, k)
	}
}
