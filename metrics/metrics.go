package metrics

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/courier-go/courier/store"
)

// Config tunes a Collector. Zero fields take the defaults given; every
// source is optional.
type Config struct {
	// Outbox is queried for the outbox gauges (pending messages, oldest
	// pending age, …). Nil: no outbox gauges. StoreStats adapts a store.
	Outbox OutboxSource
	// Sagas is queried for the saga gauges. Nil: none. No store answers
	// it yet: implement it with a query of your own (see SagaSource).
	Sagas SagaSource
	// Keys is queried for the idempotency-key gauge. Nil: none. No store
	// answers it yet (see KeySource).
	Keys KeySource
	// Slots is queried for the replication slot gauges (PostgreSQL's
	// logical replication slots, which CDC relays read). Nil: none.
	// FromStatus answers it.
	Slots SlotSource
	// Scheduled is queried for the scheduled messages' gauges. Nil: none.
	// FromStatus answers it.
	Scheduled ScheduleSource
	// ConsumerHolds is queried for the gauges of the keys consumers hold
	// (inbox.ConsumerConfig.HoldKeys), per consumer. Nil: none.
	// FromStatus answers it.
	ConsumerHolds ConsumerHeldSource
	// MinInterval is the shortest time between two queries of the sources:
	// a scrape within MinInterval of the last query is answered from its
	// results, however many scrapers there are and however often they
	// come. Default DefaultMinInterval (10s).
	MinInterval time.Duration
	// QueryTimeout bounds the queries of one refresh. Default
	// DefaultQueryTimeout (5s).
	QueryTimeout time.Duration
	// MaxTopics bounds the topic label of the outbox gauges and of the
	// consumers' latency histogram, each on its own: the first
	// MaxTopics topics the Collector reports keep series of their own for
	// its lifetime, and the others are reported together under the topic
	// OtherTopics (summed; their oldest pending age is the largest).
	// Topics are data, and a program that writes one per customer would
	// otherwise make a series per customer. Default DefaultMaxTopics (100).
	MaxTopics int
	// MaxTenants bounds the tenant label of the tenants' series (Tenant):
	// the first MaxTenants tenants seen keep series of their own, and the
	// others are counted together under OtherTenants. Default
	// DefaultMaxTenants (100).
	MaxTenants int
}

// The defaults of Config's zero fields.
const (
	DefaultMinInterval  = 10 * time.Second
	DefaultQueryTimeout = 5 * time.Second
	DefaultMaxTopics    = 100
	DefaultMaxTenants   = 100
)

// OtherTopics is the topic label of the outbox gauges' series that sums the
// topics past Config.MaxTopics. No topic can take it: topics hold no white
// space (courier.Message.Validate).
const OtherTopics = "other topics"

func (c *Config) setDefaults() {
	if c.MinInterval == 0 {
		c.MinInterval = DefaultMinInterval
	}
	if c.QueryTimeout == 0 {
		c.QueryTimeout = DefaultQueryTimeout
	}
	if c.MaxTopics == 0 {
		c.MaxTopics = DefaultMaxTopics
	}
	if c.MaxTenants == 0 {
		c.MaxTenants = DefaultMaxTenants
	}
}

func (c *Config) validate() error {
	switch {
	case c.MinInterval < 0:
		return fmt.Errorf("metrics: Config.MinInterval is %s: use 0 for the default (%s) or more", c.MinInterval, DefaultMinInterval)
	case c.QueryTimeout < 0:
		return fmt.Errorf("metrics: Config.QueryTimeout is %s: use 0 for the default (%s) or more", c.QueryTimeout, DefaultQueryTimeout)
	case c.MaxTopics < 0:
		return fmt.Errorf("metrics: Config.MaxTopics is %d: use 0 for the default (%d) or more", c.MaxTopics, DefaultMaxTopics)
	case c.MaxTenants < 0:
		return fmt.Errorf("metrics: Config.MaxTenants is %d: use 0 for the default (%d) or more", c.MaxTenants, DefaultMaxTenants)
	}
	return nil
}

// Validate reports whether New would accept c: nil, or an error naming the
// field and the fix. Zero fields take their defaults first, as in New.
func (c Config) Validate() error {
	c.setDefaults()
	return c.validate()
}

// OutboxSource answers the query behind the outbox gauges. Each TopicStats
// becomes one series per gauge, labelled with its topic, up to
// Config.MaxTopics topics (the others are summed under OtherTopics).
type OutboxSource interface {
	// OutboxStats reports the outbox, per topic or as one total with
	// Topic "".
	OutboxStats(ctx context.Context) ([]TopicStats, error)
}

// TopicStats is the outbox's state for one topic, or for all of them when
// Topic is "".
type TopicStats struct {
	// Topic is the messages' topic; "" for the totals of every topic.
	Topic string
	// Pending counts unpublished messages, leased and backing off
	// included.
	Pending int64
	// Leased counts pending messages a relay holds right now.
	Leased int64
	// InBackoff counts pending messages waiting for a retry.
	InBackoff int64
	// DeadLetters counts messages parked as dead letters.
	DeadLetters int64
	// OldestPendingAge is how long the oldest pending message has waited,
	// 0 when none is pending.
	OldestPendingAge time.Duration
}

// StatsReader is what StoreStats needs: store.Admin and store.RelayStore
// both have it.
type StatsReader interface {
	Stats(ctx context.Context) (store.Stats, error)
}

// StoreStats adapts a store's Stats (store.Admin, store.RelayStore) to an
// OutboxSource: one TopicStats with Topic "", the totals of every topic.
// The series then carry the label topic="". A store that breaks its stats
// down by topic plugs in as an OutboxSource of its own, one TopicStats per
// topic, without changing the metrics' names.
// It answers the held keys' gauges too (HeldSource), from the same Stats.
func StoreStats(s StatsReader) OutboxSource { return &storeStats{s: s} }

type storeStats struct {
	s StatsReader
	lastStats
}

func (s *storeStats) OutboxStats(ctx context.Context) ([]TopicStats, error) {
	st, err := s.s.Stats(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.last, s.fresh = st, true
	s.mu.Unlock()
	return []TopicStats{{
		Pending: st.Pending, Leased: st.Leased, InBackoff: st.InBackoff, DeadLetters: st.DeadLetters,
		OldestPendingAge: st.OldestPendingAge(),
	}}, nil
}

// SagaSource answers the query behind the saga gauges. No store implements
// it yet; a program can, with one query over its saga table, for example
// on PostgreSQL:
//
//	SELECT saga_type, state, count(*),
//	       count(*) FILTER (WHERE deadline <= now() AND phase IN ('running', 'compensating'))
//	FROM courier_sagas GROUP BY saga_type, state
//
// (check the column names against your schema version).
type SagaSource interface {
	// SagaStats reports the saga instances by type and state.
	SagaStats(ctx context.Context) ([]SagaStats, error)
}

// SagaStats counts the instances of one saga type in one state.
type SagaStats struct {
	// Type is the saga's type (saga.Definition's Type).
	Type string
	// State is the instances' state.
	State string
	// Instances counts them.
	Instances int64
	// Overdue counts those not finished whose deadline has passed: the
	// saga's timeout handling has not caught up with them.
	Overdue int64
}

// KeySource answers the query behind the idempotency-key gauge. No store
// implements it yet; a program can, with one query counting the in-flight
// records of courier_idempotency_keys (see KeyStats.Scope on grouping
// them).
type KeySource interface {
	// KeysInFlight reports the idempotency keys whose request is still
	// being processed, by scope.
	KeysInFlight(ctx context.Context) ([]KeyStats, error)
}

// KeyStats counts the in-flight idempotency keys of one scope.
type KeyStats struct {
	// Scope labels the series. Return few of them: usually one total
	// with Scope "", or one per endpoint. An idempotency.Config Scope per
	// user would make a series per user.
	Scope string
	// InFlight counts the scope's keys whose request has not finished.
	InFlight int64
}

// SlotSource answers the query behind the replication slot gauges.
// FromStatus answers it from store.Status.Slots.
type SlotSource interface {
	// SlotStats reports the database's logical replication slots.
	SlotStats(ctx context.Context) ([]SlotStats, error)
}

// SlotStats is one logical replication slot's lag (see
// store.ReplicationSlot, which says how PostgreSQL measures it).
type SlotStats struct {
	// Slot is the slot's name.
	Slot string
	// Active is true while a reader (a CDC relay) is connected to it.
	Active bool
	// LagBytes is the log written that its reader has not confirmed.
	LagBytes int64
	// RetainedBytes is the log PostgreSQL keeps for it.
	RetainedBytes int64
	// Lag is how far the reader's confirmations run behind what it was
	// sent, when LagKnown.
	Lag      time.Duration
	LagKnown bool
}

// ScheduleSource answers the query behind the scheduled messages' gauges.
// FromStatus answers it from store.Status.Scheduled.
type ScheduleSource interface {
	// ScheduleStats reports the scheduled messages that wait.
	ScheduleStats(ctx context.Context) (ScheduleStats, error)
}

// ScheduleStats is the scheduled messages that wait to be released.
type ScheduleStats struct {
	// Waiting counts them.
	Waiting int64
	// Due counts those whose due time has passed; a running relay
	// releases them within milliseconds.
	Due int64
	// NextDue is how long until the earliest falls due (negative: it is
	// overdue), when Known.
	NextDue time.Duration
	Known   bool
}

// Collector is a prometheus.Collector of Courier's metrics. Register it in
// a registry of your own; it registers nothing by itself. Hand
// Collector.Relay to relay.Config.Observer and Collector.Consumer to
// inbox.ConsumerConfig.Observer to fill the relay and consumer metrics; the
// gauges of the configured sources are queried at most once per
// MinInterval. A Collector may serve any number of relays and consumers:
// their counts add up.
type Collector struct {
	cfg Config
	now func() time.Time

	// relay
	claimedBatches, claimedMessages, published, retried, dead, leaseLost, released prometheus.Counter
	publishErrors                                                                  *prometheus.CounterVec
	publishDuration, publishLatency                                                prometheus.Histogram
	// consumer
	processed, duplicates, failed, replayed *prometheus.CounterVec
	parked                                  *prometheus.CounterVec
	handlerDuration                         *prometheus.HistogramVec
	groupSize                               *prometheus.HistogramVec
	consumerLatency                         *prometheus.HistogramVec
	clockSkew                               *prometheus.CounterVec
	latencyMu                               sync.Mutex
	latencyTopics                           map[string]bool // the topics with latency series of their own, at most MaxTopics
	// tenants (Tenant)
	tenantPublished, tenantRetried, tenantDead *prometheus.CounterVec
	tenantLatency                              *prometheus.HistogramVec
	tenantMu                                   sync.Mutex
	tenants                                    map[string]bool // the tenants with series of their own, at most MaxTenants
	// queries
	queries, queryErrors *prometheus.CounterVec
	lastSuccess          *prometheus.GaugeVec
	// continuous audit (Audit)
	audit *auditMetrics

	descs struct {
		pending, leased, backoff, deadLetters, oldest  *prometheus.Desc
		heldKeys, heldMessages, oldestHold             *prometheus.Desc
		sagas, overdue, keys                           *prometheus.Desc
		slotLag, slotRetained, slotSeconds, slotActive *prometheus.Desc
		scheduled, scheduledDue, nextDue               *prometheus.Desc
		consumerHeldKeys, consumerHeld, consumerOldest *prometheus.Desc
	}

	mu       sync.Mutex // held while querying: scrapes queue behind one query
	queried  time.Time  // the last query's start; zero before the first
	snapshot snapshot
	topics   map[string]bool // the topics with series of their own, at most MaxTopics
}

// snapshot is the result of the last queries.
type snapshot struct {
	outbox    []TopicStats
	outboxErr error
	held      *HeldStats // nil: the outbox source answers no HeldStats
	sagas     []SagaStats
	keys      []KeyStats
	slots     []SlotStats
	scheduled ScheduleStats
	consumers []ConsumerHeldStats
}

// Buckets of the histograms, in seconds.
var (
	publishBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900}
	handlerBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
)

// New returns a Collector. It fails when the configuration is invalid,
// naming the field.
func New(cfg Config) (*Collector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	c := &Collector{cfg: cfg, now: time.Now, topics: map[string]bool{}, latencyTopics: map[string]bool{}, tenants: map[string]bool{}}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	c.claimedBatches = counter("courier_relay_claimed_batches_total", "Batches the relay claimed (claims that leased at least one message).")
	c.claimedMessages = counter("courier_relay_claimed_messages_total", "Messages the relay claimed.")
	c.published = counter("courier_relay_published_messages_total", "Messages the broker acknowledged and the relay marked published.")
	c.retried = counter("courier_relay_retried_messages_total", "Failed publishes scheduled for another attempt.")
	c.dead = counter("courier_relay_dead_lettered_messages_total", "Messages parked as dead letters after their last attempt, or at once when the broker rejected them for good.")
	c.leaseLost = counter("courier_relay_lease_losses_total", "Batches whose outcome could not be recorded before their lease ended; their published messages are published again.")
	c.released = counter("courier_relay_released_messages_total", "Scheduled messages the relay moved into the outbox once they were due.")
	c.publishErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "courier_relay_publish_errors_total",
		Help: "Messages the broker did not acknowledge, by kind: unavailable (the broker's fault, not counted against the message), rejected (refused for good) or refused (counted, retried).",
	}, []string{"kind"})
	c.publishDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "courier_relay_publish_duration_seconds",
		Help:    "Time one call to the broker took, from sending a round of messages to the last acknowledgement.",
		Buckets: publishBuckets,
	})
	c.publishLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "courier_relay_publish_latency_seconds",
		Help:    "Time from a message's OccurredAt (set when it is built, just before its transaction commits; a scheduled message's due time) to the broker's acknowledgement.",
		Buckets: latencyBuckets,
	})
	byConsumer := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"consumer"})
	}
	c.processed = byConsumer("courier_consumer_processed_messages_total", "Messages whose handler's effects committed with their inbox marker.")
	c.duplicates = byConsumer("courier_consumer_duplicate_messages_total", "Deliveries skipped because the message had been applied before.")
	c.failed = byConsumer("courier_consumer_failed_runs_total", "Handler runs that failed (their transaction rolled back); the message is retried or parked.")
	c.replayed = byConsumer("courier_consumer_replayed_messages_total", "Parked messages applied on an operator's request (courier dlq replay) and unparked.")
	c.parked = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "courier_consumer_parked_messages_total",
		Help: "Deliveries parked as consume-side dead letters, by reason (malformed, failed, newer_version, held: parked behind a parked message of their key).",
	}, []string{"consumer", "reason"})
	c.handlerDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "courier_consumer_handler_duration_seconds",
		Help:    "Time one handler run took through the inbox, its transaction included, whatever its outcome.",
		Buckets: handlerBuckets,
	}, []string{"consumer"})
	c.groupSize = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "courier_consumer_group_size_messages",
		Help:    "Deliveries applied in one transaction by a consumer with grouped commits (inbox.ConsumerConfig.Group), per group committed.",
		Buckets: []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000},
	}, []string{"consumer"})
	c.newConsumerLatency()
	c.newTenantMetrics()
	c.audit = newAuditMetrics(func() time.Time { return c.now() })
	c.queries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "courier_stats_queries_total",
		Help: "Queries behind the gauges, by source (outbox, sagas, idempotency, slots); at most one per source per MinInterval.",
	}, []string{"source"})
	c.queryErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "courier_stats_query_errors_total",
		Help: "Queries behind the gauges that failed, by source; the gauges keep the last values read.",
	}, []string{"source"})
	c.lastSuccess = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "courier_stats_last_success_timestamp_seconds",
		Help: "When the gauges of a source were last read successfully, in seconds since the Unix epoch.",
	}, []string{"source"})

	topic := []string{"topic"}
	c.descs.pending = prometheus.NewDesc("courier_outbox_pending_messages", "Unpublished messages in the outbox, leased and backing off included; topic=\"\" is every topic.", topic, nil)
	c.descs.leased = prometheus.NewDesc("courier_outbox_leased_messages", "Pending messages a relay holds right now.", topic, nil)
	c.descs.backoff = prometheus.NewDesc("courier_outbox_backoff_messages", "Pending messages waiting for a retry after a failed publish.", topic, nil)
	c.descs.deadLetters = prometheus.NewDesc("courier_outbox_dead_letter_messages", "Messages parked as dead letters (courier dlq).", topic, nil)
	c.descs.oldest = prometheus.NewDesc("courier_outbox_oldest_pending_age_seconds", "How long the oldest pending message has waited; 0 when none is pending.", topic, nil)
	c.descs.heldKeys = prometheus.NewDesc("courier_outbox_held_keys", "Keys held by a dead letter (relay HoldKeys): their messages wait until it is replayed or discarded.", nil, nil)
	c.descs.heldMessages = prometheus.NewDesc("courier_outbox_held_messages", "Messages waiting behind a dead letter that holds their key.", nil, nil)
	c.descs.oldestHold = prometheus.NewDesc("courier_outbox_oldest_hold_age_seconds", "How long the oldest dead letter that holds its key has held it; 0 when none does.", nil, nil)
	c.descs.sagas = prometheus.NewDesc("courier_saga_instances", "Saga instances by type and state.", []string{"type", "state"}, nil)
	c.descs.overdue = prometheus.NewDesc("courier_saga_overdue_instances", "Saga instances not finished whose deadline has passed, by type and state.", []string{"type", "state"}, nil)
	c.descs.keys = prometheus.NewDesc("courier_idempotency_keys_in_flight", "Idempotency keys whose request is still being processed, by scope.", []string{"scope"}, nil)
	slot := []string{"slot"}
	c.descs.slotLag = prometheus.NewDesc("courier_cdc_slot_lag_bytes", "Write-ahead log written that the replication slot's reader (a CDC relay) has not confirmed, in bytes.", slot, nil)
	c.descs.slotRetained = prometheus.NewDesc("courier_cdc_slot_retained_bytes", "Write-ahead log PostgreSQL keeps for the replication slot, in bytes: what a stopped CDC relay costs in disk.", slot, nil)
	c.descs.slotSeconds = prometheus.NewDesc("courier_cdc_slot_lag_seconds", "How long the replication slot's reader took to confirm what it was last sent (pg_stat_replication's flush_lag); absent when PostgreSQL does not know it (no reader, or caught up).", slot, nil)
	c.descs.scheduled = prometheus.NewDesc("courier_outbox_scheduled_messages", "Scheduled messages waiting to fall due (outbox.Writer.Schedule).", nil, nil)
	c.descs.scheduledDue = prometheus.NewDesc("courier_outbox_scheduled_due_messages", "Scheduled messages whose due time has passed but that no relay has released yet: above zero for long, no relay runs.", nil, nil)
	c.descs.nextDue = prometheus.NewDesc("courier_outbox_scheduled_next_due_seconds", "Time until the earliest waiting scheduled message falls due (negative: overdue); absent when none waits.", nil, nil)
	consumer := []string{"consumer"}
	c.descs.consumerHeldKeys = prometheus.NewDesc("courier_consumer_held_keys", "Keys the consumer holds (inbox HoldKeys), each behind a parked delivery: their later deliveries are parked behind it until it is replayed or discarded.", consumer, nil)
	c.descs.consumerHeld = prometheus.NewDesc("courier_consumer_held_messages", "Deliveries parked behind a parked delivery that holds their key (reason held).", consumer, nil)
	c.descs.consumerOldest = prometheus.NewDesc("courier_consumer_oldest_hold_age_seconds", "How long the consumer's oldest hold of a key has lasted (a hold passed on keeps its age); 0 when it holds none.", consumer, nil)
	c.descs.slotActive = prometheus.NewDesc("courier_cdc_slot_active", "1 while a reader (a CDC relay) is connected to the replication slot, 0 otherwise.", slot, nil)
	return c, nil
}

// collectors are the Collector's own metrics, filled by observers.
func (c *Collector) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		c.claimedBatches, c.claimedMessages, c.published, c.retried, c.dead, c.leaseLost, c.released, c.publishErrors,
		c.publishDuration, c.publishLatency,
		c.processed, c.duplicates, c.failed, c.replayed, c.parked, c.handlerDuration, c.groupSize, c.consumerLatency, c.clockSkew,
		c.tenantPublished, c.tenantRetried, c.tenantDead, c.tenantLatency,
		c.queries, c.queryErrors, c.lastSuccess,
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.collectors() {
		m.Describe(ch)
	}
	c.audit.describe(ch)
	if c.cfg.Outbox != nil {
		for _, d := range []*prometheus.Desc{c.descs.pending, c.descs.leased, c.descs.backoff, c.descs.deadLetters, c.descs.oldest} {
			ch <- d
		}
		if _, ok := c.cfg.Outbox.(HeldSource); ok {
			for _, d := range []*prometheus.Desc{c.descs.heldKeys, c.descs.heldMessages, c.descs.oldestHold} {
				ch <- d
			}
		}
	}
	if c.cfg.Sagas != nil {
		ch <- c.descs.sagas
		ch <- c.descs.overdue
	}
	if c.cfg.Keys != nil {
		ch <- c.descs.keys
	}
	if c.cfg.Slots != nil {
		for _, d := range []*prometheus.Desc{c.descs.slotLag, c.descs.slotRetained, c.descs.slotSeconds, c.descs.slotActive} {
			ch <- d
		}
	}
	if c.cfg.Scheduled != nil {
		for _, d := range []*prometheus.Desc{c.descs.scheduled, c.descs.scheduledDue, c.descs.nextDue} {
			ch <- d
		}
	}
	if c.cfg.ConsumerHolds != nil {
		for _, d := range []*prometheus.Desc{c.descs.consumerHeldKeys, c.descs.consumerHeld, c.descs.consumerOldest} {
			ch <- d
		}
	}
}

// Collect implements prometheus.Collector. It queries the sources when the
// last query is MinInterval old or more, and otherwise reports the values
// that query read.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.refresh(context.Background())
	for _, t := range s.outbox {
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, t.Topic)
		}
		gauge(c.descs.pending, float64(t.Pending))
		gauge(c.descs.leased, float64(t.Leased))
		gauge(c.descs.backoff, float64(t.InBackoff))
		gauge(c.descs.deadLetters, float64(t.DeadLetters))
		gauge(c.descs.oldest, t.OldestPendingAge.Seconds())
	}
	if h := s.held; h != nil {
		ch <- prometheus.MustNewConstMetric(c.descs.heldKeys, prometheus.GaugeValue, float64(h.Keys))
		ch <- prometheus.MustNewConstMetric(c.descs.heldMessages, prometheus.GaugeValue, float64(h.Messages))
		ch <- prometheus.MustNewConstMetric(c.descs.oldestHold, prometheus.GaugeValue, h.OldestAge.Seconds())
	}
	for _, g := range s.sagas {
		ch <- prometheus.MustNewConstMetric(c.descs.sagas, prometheus.GaugeValue, float64(g.Instances), g.Type, g.State)
		ch <- prometheus.MustNewConstMetric(c.descs.overdue, prometheus.GaugeValue, float64(g.Overdue), g.Type, g.State)
	}
	for _, k := range s.keys {
		ch <- prometheus.MustNewConstMetric(c.descs.keys, prometheus.GaugeValue, float64(k.InFlight), k.Scope)
	}
	for _, sl := range s.slots {
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, sl.Slot)
		}
		gauge(c.descs.slotLag, float64(sl.LagBytes))
		gauge(c.descs.slotRetained, float64(sl.RetainedBytes))
		if sl.LagKnown {
			gauge(c.descs.slotSeconds, sl.Lag.Seconds())
		}
		active := 0.0
		if sl.Active {
			active = 1
		}
		gauge(c.descs.slotActive, active)
	}
	if c.cfg.Scheduled != nil {
		ch <- prometheus.MustNewConstMetric(c.descs.scheduled, prometheus.GaugeValue, float64(s.scheduled.Waiting))
		ch <- prometheus.MustNewConstMetric(c.descs.scheduledDue, prometheus.GaugeValue, float64(s.scheduled.Due))
		if s.scheduled.Known {
			ch <- prometheus.MustNewConstMetric(c.descs.nextDue, prometheus.GaugeValue, s.scheduled.NextDue.Seconds())
		}
	}
	for _, h := range s.consumers {
		ch <- prometheus.MustNewConstMetric(c.descs.consumerHeldKeys, prometheus.GaugeValue, float64(h.Keys), h.Consumer)
		ch <- prometheus.MustNewConstMetric(c.descs.consumerHeld, prometheus.GaugeValue, float64(h.Messages), h.Consumer)
		ch <- prometheus.MustNewConstMetric(c.descs.consumerOldest, prometheus.GaugeValue, h.OldestAge.Seconds(), h.Consumer)
	}
	for _, m := range c.collectors() {
		m.Collect(ch)
	}
	c.audit.collect(ch)
}

// OldestPendingAge returns the largest oldest-pending age the outbox source
// reported, read as the gauges are (at most one query per MinInterval), for
// a readiness check. It fails when the Collector has no outbox source, or
// when the last query failed.
func (c *Collector) OldestPendingAge(ctx context.Context) (time.Duration, error) {
	if c.cfg.Outbox == nil {
		return 0, errors.New("metrics: the Collector has no Config.Outbox to read the oldest pending age from")
	}
	s := c.refresh(ctx)
	if s.outboxErr != nil {
		return 0, s.outboxErr
	}
	var oldest time.Duration
	for _, t := range s.outbox {
		oldest = max(oldest, t.OldestPendingAge)
	}
	return oldest, nil
}

// refresh queries the sources unless the last query is younger than
// MinInterval, and returns the latest results. Callers that come while a
// query runs wait for it and share its results. A failed query keeps the
// values of the last successful one.
func (c *Collector) refresh(ctx context.Context) snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if !c.queried.IsZero() && now.Sub(c.queried) < c.cfg.MinInterval {
		return c.snapshot
	}
	c.queried = now
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.QueryTimeout)
	defer cancel()
	s := &c.snapshot
	if c.cfg.Outbox != nil {
		v, err := c.cfg.Outbox.OutboxStats(ctx)
		if c.note("outbox", err) {
			s.outbox = c.boundTopics(v)
		}
		s.outboxErr = err
		if hs, ok := c.cfg.Outbox.(HeldSource); ok && err == nil {
			if v, err := hs.HeldStats(ctx); c.note("held", err) {
				s.held = &v
			}
		}
	}
	if c.cfg.Sagas != nil {
		if v, err := c.cfg.Sagas.SagaStats(ctx); c.note("sagas", err) {
			s.sagas = v
		}
	}
	if c.cfg.Keys != nil {
		if v, err := c.cfg.Keys.KeysInFlight(ctx); c.note("idempotency", err) {
			s.keys = v
		}
	}
	if c.cfg.Slots != nil {
		if v, err := c.cfg.Slots.SlotStats(ctx); c.note("slots", err) {
			s.slots = v
		}
	}
	if c.cfg.Scheduled != nil {
		if v, err := c.cfg.Scheduled.ScheduleStats(ctx); c.note("scheduled", err) {
			s.scheduled = v
		}
	}
	if c.cfg.ConsumerHolds != nil {
		if v, err := c.cfg.ConsumerHolds.ConsumerHeldStats(ctx); c.note("consumer_holds", err) {
			s.consumers = v
		}
	}
	return *s
}

// boundTopics returns the outbox's stats with at most MaxTopics topics of
// their own: those it kept before, then new ones while there is room; the
// rest are summed under OtherTopics. c.mu is held.
func (c *Collector) boundTopics(in []TopicStats) []TopicStats {
	out := make([]TopicStats, 0, min(len(in), c.cfg.MaxTopics+1))
	other := TopicStats{Topic: OtherTopics}
	others := false
	for _, t := range in {
		if t.Topic != OtherTopics && (c.topics[t.Topic] || len(c.topics) < c.cfg.MaxTopics) {
			c.topics[t.Topic] = true
			out = append(out, t)
			continue
		}
		others = true
		other.Pending += t.Pending
		other.Leased += t.Leased
		other.InBackoff += t.InBackoff
		other.DeadLetters += t.DeadLetters
		other.OldestPendingAge = max(other.OldestPendingAge, t.OldestPendingAge)
	}
	if others {
		out = append(out, other)
	}
	return out
}

// note counts a query of source and reports whether it succeeded.
func (c *Collector) note(source string, err error) bool {
	c.queries.WithLabelValues(source).Inc()
	if err != nil {
		c.queryErrors.WithLabelValues(source).Inc()
		return false
	}
	c.lastSuccess.WithLabelValues(source).Set(float64(c.now().UnixNano()) / 1e9)
	return true
}
