package shop

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier/idempotency"
	"github.com/courier-go/courier/store"
)

// PlaceOrder is the body of POST /orders. Amount is in cents.
type PlaceOrder struct {
	Customer string `json:"customer"`
	SKU      string `json:"sku"`
	Qty      int    `json:"qty"`
	Amount   int64  `json:"amount"`
}

// OrderPlaced is the body of POST /orders' 201 response.
type OrderPlaced struct {
	ID    string `json:"id"`
	State string `json:"state"`
}

// OrderView is the body of GET /orders/{id}.
type OrderView struct {
	ID         string            `json:"id"`
	Customer   string            `json:"customer"`
	SKU        string            `json:"sku"`
	Qty        int               `json:"qty"`
	Amount     int64             `json:"amount"`
	Status     string            `json:"status"`
	State      string            `json:"state"`
	Phase      string            `json:"phase"`
	Reason     string            `json:"reason,omitempty"`
	ChargeID   string            `json:"charge_id,omitempty"`
	ShipmentID string            `json:"shipment_id,omitempty"`
	CreatedAt  time.Time         `json:"created_at"`
	FinishedAt *time.Time        `json:"finished_at,omitempty"`
	History    []store.SagaEvent `json:"history"`
}

func (on *ordersNode) routes(keys *idempotency.Keys[*sql.Tx]) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /orders", traced("POST /orders", keys.Middleware(http.HandlerFunc(on.create))))
	mux.HandleFunc("GET /orders/{id}", on.get)
	return mux
}

// create places an order: the order row and its saga, in the transaction
// of the request's Idempotency-Key, so a retry gets this response back.
func (on *ordersNode) create(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	tx, ok := idempotency.Tx[*sql.Tx](ctx)
	if !ok {
		problem(w, http.StatusInternalServerError, "no transaction: POST /orders must run behind the idempotency middleware")
		return
	}
	var in PlaceOrder
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		problem(w, http.StatusBadRequest, "the body must be JSON: {\"customer\":\"ada\",\"sku\":\"mug\",\"qty\":1,\"amount\":1500}: "+err.Error())
		return
	}
	if msg := in.invalid(); msg != "" {
		problem(w, http.StatusBadRequest, msg)
		return
	}
	id := uuid.Must(uuid.NewV7()).String()
	_, err := tx.ExecContext(ctx, on.db.q(`INSERT INTO shop_orders (id, customer, sku, qty, amount, status, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)`),
		id, in.Customer, in.SKU, in.Qty, in.Amount, StatusOpen, time.Now().UnixMicro())
	if err != nil {
		on.log.Error("insert order", "error", err)
		problem(w, http.StatusServiceUnavailable, "the order could not be stored; retry with the same Idempotency-Key")
		return
	}
	inst, err := on.orch.Start(ctx, tx, id, orderData{Customer: in.Customer, SKU: in.SKU, Qty: in.Qty, Amount: in.Amount})
	if err != nil {
		on.log.Error("start saga", "order_id", id, "error", err)
		problem(w, http.StatusServiceUnavailable, "the order could not be started; retry with the same Idempotency-Key")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/orders/"+id)
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(OrderPlaced{ID: id, State: inst.State})
}

func (p PlaceOrder) invalid() string {
	switch {
	case strings.TrimSpace(p.Customer) == "":
		return "customer is empty: name who orders"
	case strings.TrimSpace(p.SKU) == "":
		return "sku is empty: name the article"
	case p.Qty < 1 || p.Qty > 1000:
		return fmt.Sprintf("qty is %d: order 1 to 1000 items", p.Qty)
	case p.Amount < 1:
		return fmt.Sprintf("amount is %d: give the price in cents, 1 or more", p.Amount)
	}
	return ""
}

// get shows an order with its saga.
func (on *ordersNode) get(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PathValue("id")
	v := OrderView{ID: id}
	var created int64
	var finished sql.NullInt64
	err := on.db.sql.QueryRowContext(ctx, on.db.q(`SELECT customer, sku, qty, amount, status, created_at, finished_at FROM shop_orders WHERE id = ?`), id).
		Scan(&v.Customer, &v.SKU, &v.Qty, &v.Amount, &v.Status, &created, &finished)
	if errors.Is(err, sql.ErrNoRows) {
		problem(w, http.StatusNotFound, "no order "+id)
		return
	}
	if err != nil {
		on.log.Error("read order", "order_id", id, "error", err)
		problem(w, http.StatusServiceUnavailable, "the order could not be read; try again")
		return
	}
	v.CreatedAt = time.UnixMicro(created).UTC()
	if finished.Valid {
		t := time.UnixMicro(finished.Int64).UTC()
		v.FinishedAt = &t
	}
	inst, err := on.orch.Get(ctx, id)
	if err != nil {
		on.log.Error("read saga", "order_id", id, "error", err)
		problem(w, http.StatusServiceUnavailable, "the order's saga could not be read; try again")
		return
	}
	v.State, v.Phase, v.Reason, v.History = inst.State, inst.Phase, inst.Reason, inst.History
	v.ChargeID, v.ShipmentID = inst.Data.ChargeID, inst.Data.ShipmentID
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// problem writes an RFC 9457 problem detail.
func problem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"title": http.StatusText(status), "status": status, "detail": detail})
}
