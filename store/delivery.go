package store

import (
	"context"
	"encoding/json"
	"time"
)

// Delivery keeps what watches delivery from end to end, so that every
// process (`courier status`, the dashboard, a health check) sees it,
// whichever process measured it:
//
//   - the state of each continuous audit (`courier audit --watch`, package
//     audit's Watcher), one row per watch in courier_audit_watches;
//   - the consumers' latency from a message's commit to its effect, as
//     histograms each consumer records per topic every few seconds
//     (package latency's Recorder), in courier_latency.
//
// Times are the store's clock (see [Clock]) unless said otherwise.
type Delivery interface {
	// SaveWatch records w, replacing what was recorded of the watch
	// w.Name; UpdatedAt is set to the store's clock. An empty Name is
	// refused.
	SaveWatch(ctx context.Context, w AuditWatch) error
	// Watches returns every recorded watch, by name.
	Watches(ctx context.Context) ([]AuditWatch, error)
	// DeleteWatch forgets the watch named name and reports whether there
	// was one.
	DeleteWatch(ctx context.Context, name string) (bool, error)

	// RecordLatency adds samples, each one consumer's histogram of one
	// topic over one period; At is set to the store's clock. Samples
	// with no messages are not recorded.
	RecordLatency(ctx context.Context, samples []LatencySample) error
	// Latency returns the samples recorded at or after since, oldest
	// first (by At, then by id), at most limit of them (at most
	// MaxLatencyRows): the caller asks again from the last one's At for
	// more.
	Latency(ctx context.Context, since time.Time, limit int) ([]LatencySample, error)
}

// MaxLatencyRows is the most samples one Delivery.Latency call returns.
const MaxLatencyRows = 10_000

// AuditWatch is the state of one continuous audit, as
// courier_audit_watches keeps it.
type AuditWatch struct {
	// Name tells the watch from others on the same database (one per
	// broker or stream audited).
	Name string `json:"name"`
	// Broker says what the watch reads, for people (a URL without its
	// credentials, a stream).
	Broker string `json:"broker"`
	// From and To are the window the watch has judged: every message
	// published from From to To (the broker's and the database's clocks)
	// has been compared; To is the end of its last pass.
	From time.Time `json:"from,omitzero"`
	To   time.Time `json:"to,omitzero"`
	// Passes counts its passes since it started; Failed those that failed
	// (LastError says why the last one did).
	Passes int64 `json:"passes"`
	Failed int64 `json:"failed"`
	// Lost, Phantoms, Duplicates and OrderBreaks count what it found
	// since it started (see package audit for each kind).
	Lost        int64 `json:"lost"`
	Phantoms    int64 `json:"phantoms"`
	Duplicates  int64 `json:"duplicates"`
	OrderBreaks int64 `json:"order_breaks"`
	// Interval is the time between its passes: a watch whose UpdatedAt
	// is several intervals old has stopped.
	Interval time.Duration `json:"interval_ns"`
	// LastError is why its last pass failed; empty when it succeeded.
	LastError string `json:"last_error,omitempty"`
	// Findings are its latest findings, newest last, as package audit
	// encodes them (a JSON array of audit.Finding with their kind).
	Findings json.RawMessage `json:"findings,omitempty"`
	// StartedAt is when the watch started (its process's clock);
	// UpdatedAt when it was last saved (the store's clock).
	StartedAt time.Time `json:"started_at,omitzero"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// Alarms reports whether the watch found lost messages, phantoms or order
// breaks since it started: what a consumer may have got wrong.
// Duplicates are not alarms (inboxes apply a message once).
func (w AuditWatch) Alarms() bool { return w.Lost+w.Phantoms+w.OrderBreaks > 0 }

// LatencySample is one consumer's latency histogram of one topic over one
// period, as courier_latency keeps it: how long its messages took from
// their commit (courier.Message.OccurredAt, the writer's clock) to their
// effect's commit (the consumer's clock). Package latency fills, adds and
// reads them.
type LatencySample struct {
	// ID orders samples recorded at the same At.
	ID       int64  `json:"id"`
	Consumer string `json:"consumer"`
	Topic    string `json:"topic"`
	// At is when it was recorded (the store's clock): the end of its
	// period.
	At time.Time `json:"at"`
	// Period is how long the consumer counted before it recorded it.
	Period time.Duration `json:"period_ns"`
	// Messages counts the messages applied; SumSeconds is their
	// latencies' sum.
	Messages   int64   `json:"messages"`
	SumSeconds float64 `json:"sum_seconds"`
	// Skewed counts messages applied, by the consumer's clock, before
	// they occurred by the writer's: clocks apart by more than the
	// latency (counted in the first bucket, as no time).
	Skewed int64 `json:"skewed"`
	// Buckets count the messages per latency bucket, as package latency
	// defines the buckets' bounds; the last bucket counts those above
	// the highest bound. Empty buckets at the end may be left out
	// (package latency leaves them out).
	Buckets []int64 `json:"buckets"`
}
