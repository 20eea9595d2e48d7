package metrics_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/metrics"
)

// topicsSource answers the outbox query with the topics a test sets.
type topicsSource struct {
	mu     sync.Mutex
	topics []metrics.TopicStats
}

func (s *topicsSource) set(ts ...metrics.TopicStats) { s.mu.Lock(); s.topics = ts; s.mu.Unlock() }

func (s *topicsSource) OutboxStats(context.Context) ([]metrics.TopicStats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.topics, nil
}

// Topics are data: a program that writes one per customer would make the
// outbox gauges grow a series per customer. The first MaxTopics topics the
// Collector reports keep series of their own for its lifetime; the others
// are summed (their oldest age: the largest) under topic="other topics",
// which no topic can be (topics hold no spaces).
func TestTopicLabelsAreBounded(t *testing.T) {
	src := &topicsSource{}
	col, err := metrics.New(metrics.Config{Outbox: src, MaxTopics: 2, MinInterval: time.Minute})
	testenv.Must(t, err, "new")
	clk := &clock{now: time.Now()}
	metrics.SetClock(col, clk.Now)
	src.set(
		metrics.TopicStats{Topic: "orders", Pending: 5, OldestPendingAge: time.Second},
		metrics.TopicStats{Topic: "payments", Pending: 1, DeadLetters: 1},
		metrics.TopicStats{Topic: "customer-1", Pending: 2, Leased: 1, OldestPendingAge: 3 * time.Second},
		metrics.TopicStats{Topic: "customer-2", Pending: 4, InBackoff: 2, OldestPendingAge: 7 * time.Second},
	)
	want := `
# HELP courier_outbox_oldest_pending_age_seconds How long the oldest pending message has waited; 0 when none is pending.
# TYPE courier_outbox_oldest_pending_age_seconds gauge
courier_outbox_oldest_pending_age_seconds{topic="orders"} 1
courier_outbox_oldest_pending_age_seconds{topic="other topics"} 7
courier_outbox_oldest_pending_age_seconds{topic="payments"} 0
# HELP courier_outbox_pending_messages Unpublished messages in the outbox, leased and backing off included; topic="" is every topic.
# TYPE courier_outbox_pending_messages gauge
courier_outbox_pending_messages{topic="orders"} 5
courier_outbox_pending_messages{topic="other topics"} 6
courier_outbox_pending_messages{topic="payments"} 1
`
	if err := testutil.CollectAndCompare(col, strings.NewReader(want), "courier_outbox_pending_messages", "courier_outbox_oldest_pending_age_seconds"); err != nil {
		t.Fatal(err)
	}
	// A thousand topics later, the two first seen still have their series.
	var many []metrics.TopicStats
	for i := range 1000 {
		many = append(many, metrics.TopicStats{Topic: "t" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + string(rune('a'+i/26)), Pending: 1})
	}
	src.set(append(many, metrics.TopicStats{Topic: "payments", Pending: 3})...)
	clk.Add(time.Minute)
	if n := testutil.CollectAndCount(col, "courier_outbox_pending_messages"); n != 2 {
		t.Fatalf("%d pending series with 1,001 topics; want payments and other topics", n)
	}
	want = `
# HELP courier_outbox_pending_messages Unpublished messages in the outbox, leased and backing off included; topic="" is every topic.
# TYPE courier_outbox_pending_messages gauge
courier_outbox_pending_messages{topic="other topics"} 1000
courier_outbox_pending_messages{topic="payments"} 3
`
	if err := testutil.CollectAndCompare(col, strings.NewReader(want), "courier_outbox_pending_messages"); err != nil {
		t.Fatal(err)
	}
	if _, err := metrics.New(metrics.Config{MaxTopics: -1}); err == nil || !strings.Contains(err.Error(), "Config.MaxTopics") {
		t.Errorf("negative MaxTopics: %v", err)
	}
}
