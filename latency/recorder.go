package latency

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/metrics"
	"github.com/courier-go/courier/store"
)

// The defaults of Config's zero fields.
const (
	DefaultFlushEvery   = 10 * time.Second
	DefaultFlushTimeout = 5 * time.Second
)

// Config tunes a Recorder. Zero fields take the defaults given.
type Config struct {
	// Delivery is where the Recorder records its histograms (store.Delivery's
	// RecordLatency, table courier_latency). Required.
	Delivery store.Delivery
	// FlushEvery is the time between two flushes of Run: each records one
	// sample per consumer and topic that applied a message since the last.
	// Default DefaultFlushEvery (10s).
	FlushEvery time.Duration
	// FlushTimeout bounds the flush Run makes when its context ends.
	// Default DefaultFlushTimeout (5s).
	FlushTimeout time.Duration
	// MaxTopics bounds the topics with histograms of their own: the first
	// MaxTopics topics the Recorder sees keep theirs for its lifetime, and
	// the others are counted together under metrics.OtherTopics, as the
	// metrics' topic label is. Default metrics.DefaultMaxTopics (100).
	MaxTopics int
	// Logger logs the flushes that fail. Default slog.Default().
	Logger *slog.Logger
	// Clock is the consumer's clock, against which a message's OccurredAt
	// is measured. Default time.Now.
	Clock courier.Clock
}

func (c *Config) setDefaults() {
	if c.FlushEvery == 0 {
		c.FlushEvery = DefaultFlushEvery
	}
	if c.FlushTimeout == 0 {
		c.FlushTimeout = DefaultFlushTimeout
	}
	if c.MaxTopics == 0 {
		c.MaxTopics = metrics.DefaultMaxTopics
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports whether NewRecorder would accept c: nil, or an error
// naming the field and the fix. Zero fields take their defaults first.
func (c Config) Validate() error {
	c.setDefaults()
	switch {
	case c.Delivery == nil:
		return errors.New("latency: Config.Delivery is nil: set it to the database's store.Delivery, where the samples are recorded")
	case c.FlushEvery < 0:
		return fmt.Errorf("latency: Config.FlushEvery is %s: use 0 for the default (%s) or more", c.FlushEvery, DefaultFlushEvery)
	case c.FlushTimeout < 0:
		return fmt.Errorf("latency: Config.FlushTimeout is %s: use 0 for the default (%s) or more", c.FlushTimeout, DefaultFlushTimeout)
	case c.MaxTopics < 0:
		return fmt.Errorf("latency: Config.MaxTopics is %d: use 0 for the default (%d) or more", c.MaxTopics, metrics.DefaultMaxTopics)
	}
	return nil
}

// Recorder is an inbox.Observer that measures each applied message's
// latency, from its OccurredAt to now, in a Histogram per consumer and
// topic, and records the histograms in the database: every FlushEvery
// while Run runs, once more when it stops, and whenever Flush is called.
// Messages without an OccurredAt, failed runs and duplicates are not
// counted. One Recorder may observe any number of consumers (set it with
// inbox.Observers next to other observers). Its methods are safe for
// concurrent use.
type Recorder struct {
	inbox.NopObserver

	cfg     Config
	flushMu sync.Mutex // one flush at a time

	mu     sync.Mutex
	hists  map[key]*Histogram
	topics map[string]bool // the topics with histograms of their own, at most MaxTopics
	since  time.Time       // the start of the period the histograms count
}

// key is a histogram's consumer and topic.
type key struct{ consumer, topic string }

// NewRecorder returns a Recorder. It fails when the configuration is
// invalid, naming the field.
func NewRecorder(cfg Config) (*Recorder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	return &Recorder{cfg: cfg, hists: map[key]*Histogram{}, topics: map[string]bool{}, since: cfg.Clock.Now()}, nil
}

// Handled counts msg's latency when res is Applied and err nil.
func (r *Recorder) Handled(consumer string, msg courier.Message, res inbox.Result, err error, _ time.Duration) {
	if err != nil || res != inbox.Applied || msg.OccurredAt.IsZero() {
		return
	}
	r.Observe(consumer, msg.Topic, r.cfg.Clock.Now().Sub(msg.OccurredAt))
}

// Observe counts a latency d of consumer's message of topic, as Handled
// does for an applied message.
func (r *Recorder) Observe(consumer, topic string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.topics[topic] {
		if len(r.topics) >= r.cfg.MaxTopics || topic == metrics.OtherTopics {
			topic = metrics.OtherTopics
		} else {
			r.topics[topic] = true
		}
	}
	k := key{consumer, topic}
	h := r.hists[k]
	if h == nil {
		h = &Histogram{}
		r.hists[k] = h
	}
	h.Observe(d)
}

// Flush records a sample of each histogram that counted a message since
// the last flush, and empties them. When recording fails the counts are
// kept for the next flush, which then covers both periods, and the
// store's error is returned.
func (r *Recorder) Flush(ctx context.Context) error {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	r.mu.Lock()
	now := r.cfg.Clock.Now()
	period := max(now.Sub(r.since), 0)
	var samples []store.LatencySample
	for k, h := range r.hists {
		if h.Messages == 0 {
			continue
		}
		samples = append(samples, h.Sample(k.consumer, k.topic, period))
		*h = Histogram{Buckets: clear0(h.Buckets)}
	}
	since := r.since
	r.since = now
	r.mu.Unlock()
	if len(samples) == 0 {
		return nil
	}
	err := r.cfg.Delivery.RecordLatency(ctx, samples)
	if err == nil {
		return nil
	}
	// Put the counts back, and the period's start: the next flush
	// records them.
	r.mu.Lock()
	defer r.mu.Unlock()
	r.since = since
	for _, s := range samples {
		back, ferr := FromSample(s)
		if ferr != nil {
			continue // it came from a Histogram: it cannot fail
		}
		r.hists[key{s.Consumer, s.Topic}].Add(back)
	}
	return fmt.Errorf("latency: record %d samples: %w", len(samples), err)
}

// clear0 zeroes b and returns it.
func clear0(b []int64) []int64 {
	clear(b)
	return b
}

// Run flushes every FlushEvery until ctx ends, then flushes once more
// (within FlushTimeout) and returns nil. A flush that fails is logged;
// its counts wait for the next one.
func (r *Recorder) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.FlushEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.FlushTimeout)
			defer cancel()
			if err := r.Flush(fctx); err != nil {
				r.cfg.Logger.Warn("latency: last flush failed: its counts are lost", "error", err)
			}
			return nil
		case <-t.C:
			if err := r.Flush(ctx); err != nil && ctx.Err() == nil {
				r.cfg.Logger.Warn("latency: flush failed: its counts wait for the next one", "error", err)
			}
		}
	}
}
