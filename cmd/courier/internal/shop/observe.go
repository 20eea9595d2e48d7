package shop

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/courier-go/courier/health"
	"github.com/courier-go/courier/metrics"
	"github.com/courier-go/courier/relay"
)

// observability is one incarnation's /metrics, /healthz and /readyz
// (Config.MetricsAddr): Courier's metrics of the service's relay and
// consumer, its outbox, sagas and idempotency keys, and its health.
type observability struct {
	col *metrics.Collector
	ln  net.Listener
}

// observe listens on Config.MetricsAddr, nil when it is empty.
func (b *base) observe(db *serviceDB) (*observability, error) {
	if b.cfg.MetricsAddr == "" {
		return nil, nil
	}
	src := metrics.FromStatus(db.Operations())
	col, err := metrics.New(metrics.Config{Outbox: src, Sagas: src, Keys: src, ConsumerHolds: src, MinInterval: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", b.cfg.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("metrics address %s: %w", b.cfg.MetricsAddr, err)
	}
	return &observability{col: col, ln: ln}, nil
}

// relayObserver and consumerObserver are the observers to configure, nil
// without metrics.
func (o *observability) relayObserver() relay.Observer {
	if o == nil {
		return nil
	}
	return o.col.Relay()
}

// serve serves the endpoints for r on db until ctx ends.
func (o *observability) serve(ctx context.Context, r *relay.Relay, db *serviceDB) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(o.col, collectors.NewGoCollector())
	h, err := health.New(health.Config{
		Relay:            r,
		Stall:            health.DefaultGrace + relayLease,
		Database:         db,
		OldestPendingAge: o.col.OldestPendingAge,
		Metrics:          promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
	})
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(o.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics endpoints: %w", err)
	}
	return nil
}
