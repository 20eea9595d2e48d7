package idempotency_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/idempotency"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store/sqlite"
)

// userKey is where the example's authentication puts the caller's user id.
type userKey struct{}

// authenticate stands for the application's authentication: it checks the
// request's credentials and puts the user's id in its context.
func authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ") // check the token here
		if !ok {
			http.Error(w, "sign in", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, user)))
	})
}

// Protect POST /orders with the Idempotency-Key header, on SQLite. Keys are
// kept per user (the principal the authentication in front found). The
// order, its outbox message and the stored response commit together; a
// retry gets the first response back and creates nothing; the key reused
// for another request is refused; another user's request with the same key
// is an operation of its own.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "courier-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(filepath.Join(dir, "shop.db"))
	if err != nil {
		panic(err)
	}
	defer db.Close()
	d := sqlite.NewDriver(db) // hands out every store of the database
	if _, err := d.Migrate(ctx); err != nil {
		panic(err)
	}
	if _, err := db.Exec("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)"); err != nil {
		panic(err)
	}

	keys, err := idempotency.New(d.Idempotency(), idempotency.Config{Scope: idempotency.ScopeFromContext(userKey{})})
	if err != nil {
		panic(err)
	}
	w := outbox.New(d.Inserter(), outbox.Config{})
	createOrder := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		tx, _ := idempotency.Tx[*sql.Tx](r.Context()) // the key's transaction
		var in struct{ Item string }
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Item == "" {
			http.Error(rw, "item required", http.StatusBadRequest) // stored too: a retry gets 400 again
			return
		}
		res, err := tx.ExecContext(r.Context(), "INSERT INTO orders (item) VALUES (?)", in.Item)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusInternalServerError) // rolled back, not stored
			return
		}
		id, _ := res.LastInsertId()
		msg, err := courier.NewJSON("orders", fmt.Sprint(id), map[string]any{"id": id, "item": in.Item},
			courier.WithType("OrderPlaced"))
		if err == nil {
			err = w.Write(r.Context(), tx, msg)
		}
		if err != nil {
			http.Error(rw, err.Error(), http.StatusInternalServerError)
			return
		}
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(http.StatusCreated)
		fmt.Fprintf(rw, `{"id":%d,"item":%q}`, id, in.Item)
	})
	mux := http.NewServeMux()
	mux.Handle("POST /orders", authenticate(keys.Middleware(createOrder)))

	post := func(user, key, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+user)
		req.Header.Set(idempotency.HeaderKey, key)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		return rec
	}
	first := post("ada", "checkout-7", `{"item":"vinyl"}`)
	fmt.Println(first.Code, first.Body.String())
	retry := post("ada", "checkout-7", `{"item":"vinyl"}`) // the client did not get the answer and retries
	fmt.Println(retry.Code, retry.Body.String(), idempotency.HeaderReplayed+":", retry.Header().Get(idempotency.HeaderReplayed))
	other := post("ada", "checkout-7", `{"item":"poster"}`) // the same key for another request
	fmt.Println(other.Code)
	grace := post("grace", "checkout-7", `{"item":"vinyl"}`) // another user, the same key
	fmt.Println(grace.Code, grace.Body.String())

	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM orders").Scan(&n); err != nil {
		panic(err)
	}
	fmt.Println("orders:", n)
	// Output:
	// 201 {"id":1,"item":"vinyl"}
	// 201 {"id":1,"item":"vinyl"} Idempotent-Replayed: true
	// 422
	// 201 {"id":2,"item":"vinyl"}
	// orders: 2
}
