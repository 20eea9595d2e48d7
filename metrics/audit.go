package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/courier-go/courier/audit"
)

// Audit returns the observer that fills the continuous audit's metrics;
// set it as audit.WatchConfig.Observer. The watch's name labels its
// series (watch="…"): one Collector may serve several watches.
//
//	courier_audit_lost_messages_total            published per the database, not on the broker
//	courier_audit_phantom_messages_total         on the broker, unknown to the database
//	courier_audit_duplicate_messages_total       extra copies on the broker
//	courier_audit_order_breaks_total             a key's message after a later one of it
//	courier_audit_passes_total                   passes, failed ones included
//	courier_audit_pass_errors_total              passes that failed
//	courier_audit_judged_messages_total          broker messages judged
//	courier_audit_pass_duration_seconds          how long a pass took (histogram)
//	courier_audit_window_seconds                 how far back the watch remembers
//	courier_audit_lag_seconds                    how far behind now the judged range ends
//	courier_audit_last_pass_timestamp_seconds    when the last pass ended
//
// The lag is computed at each scrape: it grows while passes fail or the
// watch has stopped, which is what an alert on it catches.
func (c *Collector) Audit() audit.WatchObserver { return auditObserver{c.audit} }

// auditMetrics are the continuous audit's series.
type auditMetrics struct {
	now                                             func() time.Time
	lost, phantoms, duplicates, orderBreaks, judged *prometheus.CounterVec
	passes, passErrors                              *prometheus.CounterVec
	duration                                        *prometheus.HistogramVec
	window, lag, lastPass                           *prometheus.Desc
	mu                                              sync.Mutex
	states                                          map[string]audit.WatchState // the last state of each watch that passed
}

// auditBuckets are the pass durations' buckets, in seconds.
var auditBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

func newAuditMetrics(now func() time.Time) *auditMetrics {
	watch := []string{"watch"}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, watch)
	}
	return &auditMetrics{
		now: now,
		lost: counter("courier_audit_lost_messages_total",
			"Messages the database recorded as published (the broker acknowledged them) that the broker does not hold: consumers never saw them. Publish them again from their copies and fix the broker's durability (see courier status and the dashboard's Delivery page)."),
		phantoms: counter("courier_audit_phantom_messages_total",
			"Courier messages on the broker that the database does not know: after a database failover, events whose transaction was lost. Find their effects by message id in the consumers' inboxes and reconcile them."),
		duplicates: counter("courier_audit_duplicate_messages_total",
			"Extra copies of messages the broker holds more than once (a relay crashed between the acknowledgement and its record). Inboxes apply each once; many of them mean relays crash or lose their leases often."),
		orderBreaks: counter("courier_audit_order_breaks_total",
			"Messages the broker holds after a later message of their key: their consumers saw the later event first. Look for a replayed dead letter, a republished copy, partitions added to a Kafka topic or another publisher."),
		judged: counter("courier_audit_judged_messages_total",
			"Broker messages the watch judged (each once), duplicates included: a rate near the relays' published rate says the audit keeps up."),
		passes: counter("courier_audit_passes_total",
			"Passes the watch made, failed ones included."),
		passErrors: counter("courier_audit_pass_errors_total",
			"Passes that failed (the database or the broker could not be read); the next pass reads what this one did not. The log and courier status give the error."),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "courier_audit_pass_duration_seconds",
			Help:    "Time one successful pass took, reading both sides and judging: near the interval, the watch cannot keep up (lengthen --interval or shorten --remember).",
			Buckets: auditBuckets,
		}, watch),
		window: prometheus.NewDesc("courier_audit_window_seconds",
			"How far back the watch remembers messages to tell duplicates and order breaks from first copies (its Remember, once it has run that long).", watch, nil),
		lag: prometheus.NewDesc("courier_audit_lag_seconds",
			"How far behind now the range the watch has judged ends: its slack plus up to an interval while passes succeed; growing, passes fail or the watch stopped.", watch, nil),
		lastPass: prometheus.NewDesc("courier_audit_last_pass_timestamp_seconds",
			"When the watch's last successful pass ended, in seconds since the Unix epoch.", watch, nil),
		states: map[string]audit.WatchState{},
	}
}

// collectors are the audit's own metrics.
func (m *auditMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.lost, m.phantoms, m.duplicates, m.orderBreaks, m.judged, m.passes, m.passErrors, m.duration}
}

func (m *auditMetrics) describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
	ch <- m.window
	ch <- m.lag
	ch <- m.lastPass
}

func (m *auditMetrics) collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	for name, s := range m.states {
		ch <- prometheus.MustNewConstMetric(m.window, prometheus.GaugeValue, s.Remembered.Seconds(), name)
		if !s.To.IsZero() {
			ch <- prometheus.MustNewConstMetric(m.lag, prometheus.GaugeValue, s.Lag(now).Seconds(), name)
		}
		if !s.LastPass.IsZero() {
			ch <- prometheus.MustNewConstMetric(m.lastPass, prometheus.GaugeValue, float64(s.LastPass.UnixNano())/1e9, name)
		}
	}
}

// touch makes the series of watch exist at 0, so that rate() and
// increase() see a watch's first finding.
func (m *auditMetrics) touch(watch string) {
	for _, c := range []*prometheus.CounterVec{m.lost, m.phantoms, m.duplicates, m.orderBreaks, m.judged, m.passes, m.passErrors} {
		c.WithLabelValues(watch)
	}
}

type auditObserver struct{ m *auditMetrics }

// Passed implements audit.WatchObserver.
func (o auditObserver) Passed(p audit.Pass, s audit.WatchState) {
	m := o.m
	m.touch(p.Name)
	m.passes.WithLabelValues(p.Name).Inc()
	m.judged.WithLabelValues(p.Name).Add(float64(p.Judged))
	m.lost.WithLabelValues(p.Name).Add(float64(p.Count(audit.KindLost)))
	m.phantoms.WithLabelValues(p.Name).Add(float64(p.Count(audit.KindPhantom)))
	m.duplicates.WithLabelValues(p.Name).Add(float64(p.Count(audit.KindDuplicate)))
	m.orderBreaks.WithLabelValues(p.Name).Add(float64(p.Count(audit.KindOrderBreak)))
	m.duration.WithLabelValues(p.Name).Observe(p.Took.Seconds())
	s.Findings = nil
	m.mu.Lock()
	m.states[p.Name] = s
	m.mu.Unlock()
}

// Failed implements audit.WatchObserver.
func (o auditObserver) Failed(name string, _ error) {
	o.m.touch(name)
	o.m.passes.WithLabelValues(name).Inc()
	o.m.passErrors.WithLabelValues(name).Inc()
}
