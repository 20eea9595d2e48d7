package latency_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/latency"
	"github.com/courier-go/courier/metrics"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/sqlite"
)

// samples is a SQLite database's store.Delivery, whose RecordLatency
// fails while fail is set, and signals recorded after each success.
type samples struct {
	store.Delivery
	mu       sync.Mutex
	fail     error
	recorded chan struct{}
}

// newSamples returns the Delivery of a new SQLite database whose store
// reads the time from now.
func newSamples(t testing.TB, now func() time.Time) *samples {
	t.Helper()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "latency.db"))
	testenv.Must(t, err, "open")
	t.Cleanup(func() { db.Close() })
	_, err = sqlite.Migrate(context.Background(), db)
	testenv.Must(t, err, "migrate")
	return &samples{Delivery: sqlite.NewDriver(db).WithClock(now).Delivery(), recorded: make(chan struct{}, 1)}
}

func (s *samples) RecordLatency(ctx context.Context, ss []store.LatencySample) error {
	s.mu.Lock()
	fail := s.fail
	s.mu.Unlock()
	if fail != nil {
		return fail
	}
	if err := s.Delivery.RecordLatency(ctx, ss); err != nil {
		return err
	}
	select {
	case s.recorded <- struct{}{}:
	default:
	}
	return nil
}

func (s *samples) setFail(err error) {
	s.mu.Lock()
	s.fail = err
	s.mu.Unlock()
}

// all reads back every sample recorded.
func (s *samples) all(t testing.TB) []store.LatencySample {
	t.Helper()
	got, err := s.Latency(context.Background(), time.Time{}, store.MaxLatencyRows)
	testenv.Must(t, err, "read the samples")
	return got
}

// clock is a time the test moves.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func msgAt(topic string, at time.Time) courier.Message {
	return courier.Message{Topic: topic, OccurredAt: at}
}

func TestRecorder(t *testing.T) {
	ctx := context.Background()
	clk := &clock{now: time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)}
	db := newSamples(t, clk.Now)
	r, err := latency.NewRecorder(latency.Config{Delivery: db, Clock: clk.Now, MaxTopics: 2})
	testenv.Must(t, err, "new recorder")

	var obs inbox.Observer = r
	t0 := clk.Now()
	clk.add(20 * time.Millisecond)
	obs.Handled("billing", msgAt("orders", t0), inbox.Applied, nil, time.Millisecond)
	obs.Handled("billing", msgAt("orders", t0), inbox.Duplicate, nil, time.Millisecond)        // not applied
	obs.Handled("billing", msgAt("orders", t0), inbox.Applied, errors.New("boom"), 0)          // failed
	obs.Handled("billing", msgAt("orders", time.Time{}), inbox.Applied, nil, time.Millisecond) // no OccurredAt
	obs.Handled("billing", msgAt("orders", clk.Now().Add(time.Second)), inbox.Applied, nil, 0) // skewed
	obs.Handled("shipping", msgAt("orders", t0), inbox.Applied, nil, 0)
	obs.Handled("billing", msgAt("payments", t0), inbox.Applied, nil, 0)
	obs.Handled("billing", msgAt("refunds", t0), inbox.Applied, nil, 0)           // past MaxTopics
	obs.Handled("billing", msgAt(metrics.OtherTopics, t0), inbox.Applied, nil, 0) // cannot take the name
	obs.Handled("billing", msgAt("audit", t0), inbox.Applied, nil, 0)             // past MaxTopics
	clk.add(10 * time.Second)
	testenv.Must(t, r.Flush(ctx), "flush")

	got := map[string]store.LatencySample{}
	for _, s := range db.all(t) {
		got[s.Consumer+"/"+s.Topic] = s
		if s.Period != 10*time.Second+20*time.Millisecond {
			t.Errorf("%s/%s: period %s, want the time since the recorder started", s.Consumer, s.Topic, s.Period)
		}
	}
	want := map[string][2]int64{ // messages, skewed
		"billing/orders": {2, 1}, "shipping/orders": {1, 0}, "billing/payments": {1, 0}, "billing/" + metrics.OtherTopics: {3, 0},
	}
	if len(got) != len(want) {
		t.Fatalf("recorded %v, want %v", got, want)
	}
	for k, w := range want {
		s := got[k]
		if s.Messages != w[0] || s.Skewed != w[1] {
			t.Errorf("%s: %d messages, %d skewed; want %d, %d", k, s.Messages, s.Skewed, w[0], w[1])
		}
		h, err := latency.FromSample(s)
		testenv.Must(t, err, "read back "+k)
		if p := h.Quantile(1); p < 17*time.Millisecond || p > 23*time.Millisecond {
			t.Errorf("%s: max latency %s, want about 20ms", k, p)
		}
	}

	// Nothing new: nothing recorded.
	clk.add(10 * time.Second)
	testenv.Must(t, r.Flush(ctx), "empty flush")
	if n := len(db.all(t)); n != 4 {
		t.Fatalf("an empty flush recorded: %d samples", n)
	}

	// A flush that fails keeps its counts, and the next one records them
	// over both periods.
	obs.Handled("billing", msgAt("orders", clk.Now().Add(-time.Second)), inbox.Applied, nil, 0)
	db.setFail(errors.New("database is down"))
	clk.add(10 * time.Second)
	if err := r.Flush(ctx); err == nil || !strings.Contains(err.Error(), "database is down") {
		t.Fatalf("flush to a failing store: %v", err)
	}
	db.setFail(nil)
	obs.Handled("billing", msgAt("orders", clk.Now().Add(-time.Second)), inbox.Applied, nil, 0)
	clk.add(10 * time.Second)
	testenv.Must(t, r.Flush(ctx), "flush after the failure")
	last := db.all(t)[4:]
	if len(last) != 1 || last[0].Messages != 2 || last[0].Period != 20*time.Second {
		t.Fatalf("after a failed flush recorded %+v, want one sample of 2 messages over 20s", last)
	}
}

// Run flushes every FlushEvery and once more when it stops.
func TestRecorderRun(t *testing.T) {
	db := newSamples(t, nil)
	r, err := latency.NewRecorder(latency.Config{Delivery: db, FlushEvery: 10 * time.Millisecond})
	testenv.Must(t, err, "new recorder")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	r.Handled("billing", msgAt("orders", time.Now()), inbox.Applied, nil, 0)
	select {
	case <-db.recorded:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not flush within 10s")
	}
	r.Handled("billing", msgAt("orders", time.Now()), inbox.Applied, nil, 0)
	cancel()
	testenv.Must(t, <-done, "run")
	var n int64
	for _, s := range db.all(t) {
		n += s.Messages
	}
	if n != 2 {
		t.Fatalf("recorded %d messages, want 2: the last flush records what the ticks left", n)
	}
}

func TestConfigValidate(t *testing.T) {
	db := newSamples(t, nil)
	for _, c := range []struct {
		cfg  latency.Config
		want string
	}{
		{latency.Config{}, "Config.Delivery is nil"},
		{latency.Config{Delivery: db, FlushEvery: -1}, "Config.FlushEvery is -1ns: use 0 for the default (10s) or more"},
		{latency.Config{Delivery: db, FlushTimeout: -1}, "Config.FlushTimeout is -1ns"},
		{latency.Config{Delivery: db, MaxTopics: -1}, "Config.MaxTopics is -1: use 0 for the default (100) or more"},
	} {
		if _, err := latency.NewRecorder(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
	testenv.Must(t, latency.Config{Delivery: db}.Validate(), "defaults")
}

// BenchmarkRecorderHandled is the Recorder's cost per applied message, on
// a consumer's goroutines, spread over a few topics.
func BenchmarkRecorderHandled(b *testing.B) {
	r, err := latency.NewRecorder(latency.Config{Delivery: newSamples(b, nil)})
	if err != nil {
		b.Fatal(err)
	}
	msgs := make([]courier.Message, 8)
	for i := range msgs {
		msgs[i] = msgAt(fmt.Sprintf("topic-%d", i), time.Now().Add(-time.Duration(i+1)*7*time.Millisecond))
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			r.Handled("billing", msgs[i%len(msgs)], inbox.Applied, nil, 0)
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				r.Handled("billing", msgs[i%len(msgs)], inbox.Applied, nil, 0)
				i++
			}
		})
	})
}

// BenchmarkRecorderFlush is one flush of 40 samples (4 consumers, 10
// topics each) into SQLite: what a Recorder costs its database every
// FlushEvery.
func BenchmarkRecorderFlush(b *testing.B) {
	r, err := latency.NewRecorder(latency.Config{Delivery: newSamples(b, nil)})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		for c := range 4 {
			for tp := range 10 {
				r.Observe(fmt.Sprintf("consumer-%d", c), fmt.Sprintf("topic-%d", tp), time.Duration(c*tp+1)*time.Millisecond)
			}
		}
		if err := r.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
