package health_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/courier-go/courier/broker/memory"
	"github.com/courier-go/courier/health"
	"github.com/courier-go/courier/metrics"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store/memstore"
)

// Serve /healthz and /readyz for a relay. Until Run starts, the relay is
// not ready; a check of the program's own joins the relay's.
func Example() {
	st := memstore.New(memstore.Config{})
	col, err := metrics.New(metrics.Config{Outbox: metrics.StoreStats(st)})
	if err != nil {
		panic(err)
	}
	r, err := relay.New(st, memory.NewPublisher(), relay.Config{Observer: col.Relay()})
	if err != nil {
		panic(err)
	}
	h, err := health.New(health.Config{
		Relay:            r,
		Grace:            time.Minute,
		OldestPendingAge: col.OldestPendingAge,
		MaxOldestPending: 5 * time.Minute,
		Checks: map[string]func(context.Context) error{
			"cache": func(context.Context) error { return errors.New("cache unreachable") },
		},
	})
	if err != nil {
		panic(err)
	}
	// A program would serve h: http.ListenAndServe(":9464", h). It
	// answers requests addressed to localhost, to its own address, or to
	// a name of Config.AllowedHosts; others get 421.
	for _, path := range []string{"/healthz", "/readyz"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost"+path, nil))
		fmt.Println(path, rec.Code)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://rebound.example/metrics", nil))
	fmt.Println("another host:", rec.Code)
	rep := h.Ready(context.Background())
	for _, name := range h.Names() {
		fmt.Printf("%s: %s\n", name, rep.Checks[name])
	}
	// Output:
	// /healthz 200
	// /readyz 503
	// another host: 421
	// cache: cache unreachable
	// outbox: ok
	// relay: relay unhealthy: not started: call Run
}
