// Package metrics exports Courier's metrics to Prometheus: a Collector that
// a program registers in a registry of its own. It registers nothing
// globally and starts no goroutine.
//
//	src := metrics.FromStatus(db.Operations())
//	col, err := metrics.New(metrics.Config{Outbox: src, Sagas: src, Keys: src, Slots: src, Scheduled: src})
//	if err != nil {
//		return err
//	}
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(col)
//	r, err := relay.New(st, pub, relay.Config{Observer: col.Relay()})
//	if err != nil {
//		return err
//	}
//	c, err := inbox.NewConsumer(ib, sub, cs, h, inbox.ConsumerConfig{Observer: col.Consumer()})
//	if err != nil {
//		return err
//	}
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
// Two histograms measure latency from a message's OccurredAt, which its
// writer sets just before its transaction commits:
// courier_relay_publish_latency_seconds to the broker's acknowledgement,
// and courier_consumer_latency_seconds, per consumer and topic, to the
// commit of a consumer's handler (commit to applied). Each compares the
// writer's clock with the relay's or the consumer's: a consumer whose
// clock is behind the writer's by more than a message took counts it as 0
// and in courier_consumer_clock_skew_messages_total. Package latency keeps
// the same figures in the database, for `courier status` and the
// dashboard.
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
// tells how old the values are. An outbox source that answers HeldSource
// (StoreStats's and FromStatus's do) adds the gauges of held keys
// (relay.Config.HoldKeys): courier_outbox_held_keys,
// courier_outbox_held_messages and courier_outbox_oldest_hold_age_seconds,
// for the whole outbox. Config.ConsumerHolds (FromStatus answers it)
// adds the gauges of the keys consumers hold (inbox.ConsumerConfig.HoldKeys),
// per consumer: courier_consumer_held_keys, courier_consumer_held_messages
// and courier_consumer_oldest_hold_age_seconds.
//
// FromStatus answers all six kinds of gauges from one store.Status per
// refresh (store.Operations, which every store.Database gives): the outbox
// per topic, saga instances by type and state with those past their
// deadline, the idempotency keys in flight, the scheduled messages that
// wait (Config.Scheduled: courier_outbox_scheduled_messages, those already
// due and the time until the next falls due) and, on PostgreSQL, the
// logical replication slots' lag (Config.Slots: courier_cdc_slot_lag_bytes
// and the rest, per slot) and the keys each consumer holds
// (Config.ConsumerHolds). StoreStats exports only the
// outbox's totals (store.Stats), with the label topic="", for a program
// that holds a store.Admin alone. Any other source implements
// OutboxSource, SagaSource or KeySource.
//
// # Bounded labels
//
// Topics are data: every topic would otherwise be a series of each outbox
// gauge. The first Config.MaxTopics topics (100 by default) a Collector
// reports keep series of their own for its lifetime; the others are summed
// under the topic OtherTopics ("other topics", which no topic can be), their
// oldest pending age the largest. The consumers' latency histogram bounds
// its topic label by the same rule, with a count of its own: the first
// MaxTopics topics consumers apply keep series of their own. The other labels take values from the
// program (consumer names, the consumer held keys' among them, saga types and states, a KeySource's scopes) or
// from the database's configuration (replication slots).
//
// # CDC relays
//
// A CDC relay (package relay/cdc) keeps counters instead of reporting to an
// observer: CDC returns a collector that reads them (its Stats) at each
// scrape, under courier_cdc_ names; register it next to the Collector.
//
// # Continuous audits
//
// Collector.Audit returns the observer a continuous audit reports its
// passes to (audit.WatchConfig.Observer): what it found, as counters
// labelled with the watch's name (courier_audit_lost_messages_total,
// _phantom_messages_total, _duplicate_messages_total, _order_breaks_total),
// its passes and failed passes, the broker messages it judged, how long a
// pass took, and gauges of how far back it remembers and how far behind
// now its judged range ends (courier_audit_lag_seconds, computed at each
// scrape, so that it grows while the watch fails or has stopped).
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
