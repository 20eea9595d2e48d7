package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/relay"
)

// OtherTenants is the tenant label of the series that count the tenants
// past Config.MaxTenants together. No tenant can take it: tenant names
// hold no white space (package tenant).
const OtherTenants = "other tenants"

func (c *Collector) newTenantMetrics() {
	byTenant := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"tenant"})
	}
	c.tenantPublished = byTenant("courier_tenant_published_messages_total", "Messages of a tenant the broker acknowledged and its relay marked published (package tenant).")
	c.tenantRetried = byTenant("courier_tenant_retried_messages_total", "Failed publishes of a tenant's messages scheduled for another attempt.")
	c.tenantDead = byTenant("courier_tenant_dead_lettered_messages_total", "Messages of a tenant parked as dead letters.")
	c.tenantLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "courier_tenant_publish_latency_seconds",
		Help:    "Time from a tenant's message's OccurredAt to the broker's acknowledgement, as courier_relay_publish_latency_seconds.",
		Buckets: latencyBuckets,
	}, []string{"tenant"})
}

// Tenant returns the observer of tenant's relay in a fleet (package
// tenant's Config.Observers): it fills the relay metrics, which sum every
// tenant, as Relay's observer does, and the courier_tenant_* series
// labelled with the tenant's name. The first Config.MaxTenants tenants
// asked for keep series of their own for the Collector's lifetime; the
// others are counted under OtherTenants, so that a thousand tenants do
// not make a thousand series each.
func (c *Collector) Tenant(name string) relay.Observer {
	c.tenantMu.Lock()
	defer c.tenantMu.Unlock()
	if !c.tenants[name] {
		if len(c.tenants) >= c.cfg.MaxTenants {
			name = OtherTenants
		} else {
			c.tenants[name] = true
		}
	}
	return tenantObserver{relayObserver: relayObserver{c}, published: c.tenantPublished.WithLabelValues(name),
		retried: c.tenantRetried.WithLabelValues(name), dead: c.tenantDead.WithLabelValues(name),
		latency: c.tenantLatency.WithLabelValues(name)}
}

type tenantObserver struct {
	relayObserver
	published, retried, dead prometheus.Counter
	latency                  prometheus.Observer
}

func (o tenantObserver) Published(msgs []courier.Message, errs []error, d time.Duration) {
	o.relayObserver.Published(msgs, errs, d)
	now := o.c.now()
	for i, err := range errs {
		if l, ok := latency(now, msgs[i]); ok && err == nil {
			o.latency.Observe(l)
		}
	}
}

func (o tenantObserver) Completed(published, retried, dead int) {
	o.relayObserver.Completed(published, retried, dead)
	o.published.Add(float64(published))
	o.retried.Add(float64(retried))
	o.dead.Add(float64(dead))
}
