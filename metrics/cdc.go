package metrics

import "github.com/prometheus/client_golang/prometheus"

// CDCStats are a CDC relay's counters (relay/cdc.Stats), as CDC reads
// them.
type CDCStats struct {
	// Published, Retried, DeadLettered and Swept count, since the relay
	// was made, messages the broker acknowledged, failed publishes tried
	// again, messages made dead letters and rows published from the table
	// at start rather than from the log.
	Published, Retried, DeadLettered, Swept int64
	// Reading is true while the relay holds its slot; false while it
	// waits as a standby or reconnects.
	Reading bool
}

// CDC returns a prometheus.Collector of a CDC relay's counters, which it
// reads from stats at each scrape; register it next to a Collector, whose
// Config.Slots gives the slot's lag. A CDC relay reports no events, unlike
// the polling relay (Collector.Relay): it keeps counters (relay/cdc's
// Relay.Stats), so package relay/cdc needs no Prometheus:
//
//	reg.MustRegister(metrics.CDC(func() metrics.CDCStats {
//		s := r.Stats()
//		return metrics.CDCStats{Published: s.Published, Retried: s.Retried,
//			DeadLettered: s.DeadLettered, Swept: s.Swept, Reading: s.Reading}
//	}))
//
// Its names start with courier_cdc_; the polling relay's courier_relay_
// counters stay at 0 in a program that runs a CDC relay only.
func CDC(stats func() CDCStats) prometheus.Collector {
	desc := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return cdcCollector{
		stats:     stats,
		published: desc("courier_cdc_published_messages_total", "Messages the broker acknowledged that the CDC relay read from the log or the table."),
		retried:   desc("courier_cdc_retried_messages_total", "Failed publishes the CDC relay will try again."),
		dead:      desc("courier_cdc_dead_lettered_messages_total", "Messages the CDC relay made dead letters, after their last attempt or at once when the broker rejected them for good."),
		swept:     desc("courier_cdc_swept_messages_total", "Rows the CDC relay published from the table when it started (written before its slot existed, or left by a relay that died), not from the log."),
		reading:   desc("courier_cdc_reading", "1 while the CDC relay reads its replication slot; 0 while it waits as a standby behind another reader, or reconnects."),
	}
}

type cdcCollector struct {
	stats                                    func() CDCStats
	published, retried, dead, swept, reading *prometheus.Desc
}

// Describe implements prometheus.Collector.
func (c cdcCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.published, c.retried, c.dead, c.swept, c.reading} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c cdcCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	for _, m := range []struct {
		d *prometheus.Desc
		n int64
	}{{c.published, s.Published}, {c.retried, s.Retried}, {c.dead, s.DeadLettered}, {c.swept, s.Swept}} {
		ch <- prometheus.MustNewConstMetric(m.d, prometheus.CounterValue, float64(m.n))
	}
	reading := 0.0
	if s.Reading {
		reading = 1
	}
	ch <- prometheus.MustNewConstMetric(c.reading, prometheus.GaugeValue, reading)
}
