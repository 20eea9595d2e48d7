package main

import (
	"context"
	"crypto/subtle"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/idempotency"
	"github.com/courier-go/courier/outbox"
)

// schema holds the service's own tables, next to Courier's (sqlite.Migrate
// makes those). Amounts are in cents.
const schema = `
CREATE TABLE IF NOT EXISTS orders (
	id         TEXT PRIMARY KEY,
	customer   TEXT NOT NULL,
	item       TEXT NOT NULL,
	total      INTEGER NOT NULL,
	created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS billing_accounts (
	customer TEXT PRIMARY KEY,
	orders   INTEGER NOT NULL,
	balance  INTEGER NOT NULL
);`

// OrderPlaced announces a new order on topic "orders", keyed by the order's
// id. Its message type is the Go type's name, "OrderPlaced": that is how the
// consumer's router finds the handler for it.
type OrderPlaced struct {
	OrderID  string `json:"order_id"`
	Customer string `json:"customer"`
	Item     string `json:"item"`
	Total    int64  `json:"total"` // cents
}

// orderRequest is the body of POST /orders.
type orderRequest struct {
	Item  string `json:"item"`
	Total int64  `json:"total"` // cents
}

// Bounds of an order request.
const (
	maxItemBytes = 100
	maxTotal     = 100_000_000 // cents
)

// decodeOrder reads and checks the body of POST /orders: one JSON object
// with an item of 1 to 100 bytes and a total of 1 to 100,000,000 cents. It
// is the service's parser of outside input; FuzzDecodeOrder exercises it.
func decodeOrder(body io.Reader) (orderRequest, error) {
	var req orderRequest
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return orderRequest{}, fmt.Errorf(`body: send one JSON object such as {"item":"vinyl","total":1999}: %w`, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return orderRequest{}, errors.New("body: send one JSON object and nothing after it")
	}
	if req.Item == "" || len(req.Item) > maxItemBytes {
		return orderRequest{}, fmt.Errorf("item: give a name of 1 to %d bytes", maxItemBytes)
	}
	if req.Total < 1 || req.Total > maxTotal {
		return orderRequest{}, fmt.Errorf("total: give the price in cents, 1 to %d", maxTotal)
	}
	return req, nil
}

// placeOrder is the handler of POST /orders. It runs behind the
// Idempotency-Key middleware, which opened the transaction it works in: the
// order, its OrderPlaced message and the response stored for retries commit
// together, or not at all.
func placeOrder(w *outbox.Writer[*sql.Tx], log *slog.Logger) http.HandlerFunc {
	return func(rw http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		tx, ok := idempotency.Tx[*sql.Tx](ctx)
		customer, _ := ctx.Value(customerKey{}).(string)
		if !ok || customer == "" { // only if the handler is mounted without its middlewares
			http.Error(rw, "internal error", http.StatusInternalServerError)
			return
		}
		req, err := decodeOrder(r.Body)
		if err != nil {
			// A 4xx answer is stored too (without any write of the
			// handler's): a retry of the same request gets it again.
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		id, err := uuid.NewV7()
		if err != nil {
			log.Error("order id", "error", err)
			http.Error(rw, "internal error", http.StatusInternalServerError)
			return
		}
		ev := OrderPlaced{OrderID: id.String(), Customer: customer, Item: req.Item, Total: req.Total}
		if err := writeOrder(ctx, tx, w, ev); err != nil {
			// A 5xx answer rolls everything back and releases the key:
			// the client may retry.
			log.Error("place order", "error", err)
			http.Error(rw, "internal error", http.StatusInternalServerError)
			return
		}
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(rw).Encode(ev)
	}
}

// writeOrder inserts the order and its OrderPlaced message in tx.
func writeOrder(ctx context.Context, tx *sql.Tx, w *outbox.Writer[*sql.Tx], ev OrderPlaced) error {
	_, err := tx.ExecContext(ctx,
		"INSERT INTO orders (id, customer, item, total, created_at) VALUES (?, ?, ?, ?, ?)",
		ev.OrderID, ev.Customer, ev.Item, ev.Total, time.Now().UTC().Format(time.RFC3339Nano))
	if err != nil {
		return fmt.Errorf("insert order: %w", err)
	}
	msg, err := courier.NewJSON("orders", ev.OrderID, ev)
	if err != nil {
		return fmt.Errorf("order message: %w", err)
	}
	if err := w.Write(ctx, tx, msg); err != nil { // one more row, in the same transaction
		return fmt.Errorf("outbox: %w", err)
	}
	return nil
}

// bill is the billing consumer's handler of OrderPlaced: it adds the order
// to its customer's account. It runs in the inbox's transaction, which also
// records that billing applied this message: a redelivery finds that record
// and is skipped, so the increment below happens once per order however
// often the broker delivers it.
func bill(ctx context.Context, tx *sql.Tx, _ courier.Message, ev OrderPlaced) error {
	_, err := tx.ExecContext(ctx, `
		INSERT INTO billing_accounts (customer, orders, balance) VALUES (?, 1, ?)
		ON CONFLICT (customer) DO UPDATE SET orders = orders + 1, balance = balance + excluded.balance`,
		ev.Customer, ev.Total)
	return err
}

// customerKey is the request context's key of the customer authenticate
// found. The Idempotency-Key middleware keeps keys per customer with it
// (idempotency.ScopeFromContext), so one customer never gets another's
// stored response.
type customerKey struct{}

// authenticate lets through only requests with a known API key
// (Authorization: Bearer KEY) and puts its customer in their context.
// apiKeys maps each customer to their key. A real service would look the
// key's hash up in its database, or verify a token here.
func authenticate(apiKeys map[string]string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		customer := ""
		for c, key := range apiKeys { // every key compared, in constant time
			if subtle.ConstantTimeCompare([]byte(token), []byte(key)) == 1 {
				customer = c
			}
		}
		if !ok || customer == "" {
			rw.Header().Set("WWW-Authenticate", `Bearer realm="orders"`)
			http.Error(rw, "send your API key: Authorization: Bearer KEY", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(rw, r.WithContext(context.WithValue(r.Context(), customerKey{}, customer)))
	})
}
