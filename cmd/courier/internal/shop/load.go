package shop

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier/idempotency"
)

// LoadConfig describes the orders a Load places.
type LoadConfig struct {
	// URL is the orders API's base URL. Required.
	URL string
	// Orders is how many orders to place. Default 100.
	Orders int
	// Concurrency is how many requests are in flight at once. Default 16.
	Concurrency int
	// SKUs are the articles ordered, at random. Required.
	SKUs []string
	// MaxQty is the largest quantity of one order (1 to MaxQty, at
	// random). Default 3.
	MaxQty int
	// ReplayRate is the probability that a placed order is POSTed again
	// with the same Idempotency-Key, as a client that lost the response
	// would; the answer must be the first one, replayed.
	ReplayRate float64
	// MaxInFlight, with Ended, bounds the orders placed but not ended: a
	// worker waits before placing another while MaxInFlight are. 0: no
	// bound, orders are placed as fast as the API takes them.
	MaxInFlight int
	// Ended returns how many orders have ended so far.
	Ended func() int
	// Client sends the requests. Default: a client of its own.
	Client *http.Client
	// Placed, if set, is called after each order is placed, with the count
	// so far.
	Placed func(n int)
}

// PlacedOrder is an order the load placed.
type PlacedOrder struct {
	ID  string
	Key string
}

// LoadResult says what a load did.
type LoadResult struct {
	// Orders are the placed orders, one per Idempotency-Key.
	Orders []PlacedOrder
	// Replays counts POSTs answered with a stored response
	// (Idempotent-Replayed: true): the deliberate ones of ReplayRate and
	// retries whose first attempt had succeeded.
	Replays int
	// ReplayMismatches counts replays that did not return the first
	// response's order: always 0 unless idempotency is broken.
	ReplayMismatches int
	// Retries counts POSTs sent again after a connection error, a 5xx or a
	// 409 (key in use).
	Retries int
	// Elapsed is how long placing took.
	Elapsed time.Duration
}

// Load places orders through the orders API, concurrently, each with an
// Idempotency-Key of its own, retrying with the same key until the order is
// placed: through restarts of the orders service, too.
type Load struct {
	cfg LoadConfig

	replays, mismatches, retries atomic.Int64
	started                      atomic.Int64 // orders let through the window
}

// NewLoad returns a load.
func NewLoad(cfg LoadConfig) (*Load, error) {
	switch {
	case cfg.URL == "":
		return nil, fmt.Errorf("shop: LoadConfig.URL is empty: give the orders API's URL")
	case len(cfg.SKUs) == 0:
		return nil, fmt.Errorf("shop: LoadConfig.SKUs is empty: name the articles to order")
	}
	if cfg.Orders <= 0 {
		cfg.Orders = 100
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 16
	}
	if cfg.MaxQty <= 0 {
		cfg.MaxQty = 3
	}
	if cfg.MaxInFlight > 0 && cfg.Ended == nil {
		return nil, fmt.Errorf("shop: LoadConfig.MaxInFlight needs Ended, to tell how many orders ended")
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Concurrency}}
	}
	return &Load{cfg: cfg}, nil
}

// Run places the orders and returns when all are placed, or ctx ends.
func (l *Load) Run(ctx context.Context) (LoadResult, error) {
	start := time.Now()
	jobs := make(chan int)
	var (
		mu       sync.Mutex
		placed   []PlacedOrder
		firstErr error
		wg       sync.WaitGroup
	)
	for range l.cfg.Concurrency {
		wg.Go(func() {
			for i := range jobs {
				if !l.window(ctx) {
					continue
				}
				o, err := l.place(ctx, i)
				mu.Lock()
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
				} else {
					placed = append(placed, o)
				}
				n := len(placed)
				mu.Unlock()
				if err == nil && l.cfg.Placed != nil {
					l.cfg.Placed(n)
				}
			}
		})
	}
feed:
	for i := range l.cfg.Orders {
		select {
		case jobs <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	if t, ok := l.cfg.Client.Transport.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
	res := LoadResult{Orders: placed, Replays: int(l.replays.Load()), ReplayMismatches: int(l.mismatches.Load()),
		Retries: int(l.retries.Load()), Elapsed: time.Since(start)}
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return res, firstErr
}

// window waits until fewer than MaxInFlight orders are in flight; it
// reports false when ctx ended first.
func (l *Load) window(ctx context.Context) bool {
	if l.cfg.MaxInFlight <= 0 {
		return true
	}
	for {
		n := l.started.Load()
		if int(n)-l.cfg.Ended() < l.cfg.MaxInFlight && l.started.CompareAndSwap(n, n+1) {
			return true
		}
		if !sleep(ctx, 5*time.Millisecond) {
			return false
		}
	}
}

// place places order i, and with ReplayRate posts it again.
func (l *Load) place(ctx context.Context, i int) (PlacedOrder, error) {
	qty := 1 + rand.IntN(l.cfg.MaxQty)
	customer := "customer-" + strconv.Itoa(rand.IntN(200))
	body, _ := json.Marshal(PlaceOrder{
		Customer: customer,
		SKU:      l.cfg.SKUs[rand.IntN(len(l.cfg.SKUs))],
		Qty:      qty,
		Amount:   int64(qty) * 1500,
	})
	key := uuid.NewString()
	id, err := l.post(ctx, customer, key, body)
	if err != nil {
		return PlacedOrder{}, fmt.Errorf("order %d: %w", i, err)
	}
	if chance(l.cfg.ReplayRate) {
		again, err := l.post(ctx, customer, key, body)
		if err != nil {
			return PlacedOrder{}, fmt.Errorf("order %d, sent again: %w", i, err)
		}
		if again != id {
			l.mismatches.Add(1)
		}
	}
	return PlacedOrder{ID: id, Key: key}, nil
}

// post sends POST /orders as customer until it gets an answer that is
// final, and returns the order's id.
func (l *Load) post(ctx context.Context, customer, key string, body []byte) (string, error) {
	wait := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			l.retries.Add(1)
			if !sleep(ctx, wait) {
				return "", ctx.Err()
			}
			wait = min(wait*2, time.Second)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.cfg.URL+"/orders", bytes.NewReader(body))
		if err != nil {
			return "", err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+customer) // the shop's keys are kept per client
		req.Header.Set(idempotency.HeaderKey, key)
		resp, err := l.cfg.Client.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			continue // the orders service may be restarting: same key, again
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusCreated:
			var out OrderPlaced
			if err := json.Unmarshal(data, &out); err != nil || out.ID == "" {
				return "", fmt.Errorf("POST /orders: 201 without an order id: %s", data)
			}
			if resp.Header.Get(idempotency.HeaderReplayed) == "true" {
				l.replays.Add(1)
			}
			return out.ID, nil
		case resp.StatusCode == http.StatusConflict || resp.StatusCode >= 500:
			continue // in flight elsewhere, or failed and released: same key, again
		default:
			return "", fmt.Errorf("POST /orders: %s: %s", resp.Status, bytes.TrimSpace(data))
		}
	}
}
