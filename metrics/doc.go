// Package metrics exports Courier's metrics to Prometheus: a Collector that
// a program registers in a registry of its own. It registers nothing
// globally and starts no goroutine.
//
//	col, err := metrics.New(metrics.Config{Outbox: metrics.StoreStats(db.Admin())})
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(col)
//	r, err := relay.New(st, pub, relay.Config{Observer: col.Relay()})
//	c, err := inbox.NewConsumer(ib, sub, cs, h, inbox.ConsumerConfig{Observer: col.Consumer()})
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// # Where the numbers come from
//
// The relay and consumer metrics are counted as things happen: the relay
// and the inbox consumer report to observers (relay.Observer,
// inbox.Observer) that Collector.Relay and Collector.Consumer return, so
// neither package imports Prometheus, and a program may implement the
// observers for another metrics system. One Collector may serve several
// relays and consumers; the relays' counts add up, the consumers' are
// labelled with the consumer's name.
//
// The gauges of the outbox (pending messages, oldest pending age, …), of
// sagas and of idempotency keys need a query. The Collector runs those
// queries while it is scraped, at most once per Config.MinInterval (10s by
// default) however many scrapers come and however often: a scrape within
// the interval gets the values the last query read, and scrapes that come
// while a query runs wait for it and share its answer. A query that fails
// keeps the last values, counts courier_stats_query_errors_total and is
// not retried before the interval has passed, so a database in trouble is
// not hammered by its monitoring. courier_stats_last_success_timestamp_seconds
// tells how old the values are.
//
// Today's stores report the outbox's totals (store.Stats), which StoreStats
// exports with the label topic="". A source that breaks the outbox down by
// topic implements OutboxSource, one TopicStats per topic, and the series
// keep their names. No store counts saga instances or in-flight
// idempotency keys yet: Config.Sagas and Config.Keys take sources a
// program writes with a query of its own (see SagaSource and KeySource).
//
// # Names
//
// Every name starts with courier_, counters end in _total, durations are in
// seconds; the full list, with what each means, is in the README
// (Observability) and in each metric's help text.
//
// # Health
//
// Package health serves /healthz and /readyz next to /metrics, and reads
// the outbox's oldest pending age through Collector.OldestPendingAge, at
// the same bounded rate.
package metrics
