package inbox_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/store/sqlite"
)

// noSubscriber is a subscriber that never delivers: the configurations
// below are refused before it is used.
type noSubscriber struct{ broker.Subscriber }

// ConsumerConfig.Validate names each bad field and its fix, as NewConsumer
// does.
func TestConsumerConfigValidate(t *testing.T) {
	if err := (inbox.ConsumerConfig{}).Validate(); err != nil {
		t.Fatalf("zero fields take their defaults: %v", err)
	}
	if err := (inbox.ConsumerConfig{NewerVersionWait: -1, Retention: -1}).Validate(); err != nil {
		t.Fatalf("a negative NewerVersionWait parks at once, a negative Retention keeps for ever: %v", err)
	}
	d := sqlite.NewDriver(nil)
	ib, err := inbox.New(d.Inbox(), "billing")
	if err != nil {
		t.Fatal(err)
	}
	h := func(context.Context, *sql.Tx, courier.Message) error { return nil }
	for _, c := range []struct {
		cfg  inbox.ConsumerConfig
		want string
	}{
		{inbox.ConsumerConfig{Concurrency: -1}, "inbox: ConsumerConfig.Concurrency is -1: use more than 0, or 0 for 4"},
		{inbox.ConsumerConfig{MaxDeliveries: -2}, "inbox: ConsumerConfig.MaxDeliveries is -2: use more than 0, or 0 for 5"},
		{inbox.ConsumerConfig{Backoff: courier.Backoff{Initial: time.Minute, Max: time.Second}}, "inbox: ConsumerConfig.Backoff is 1m0s..1s: Initial must be at least 0 and Max at least Initial"},
		{inbox.ConsumerConfig{Backoff: courier.Backoff{Jitter: 2}}, "inbox: ConsumerConfig.Backoff.Jitter is 2: use 0 to 1"},
		{inbox.ConsumerConfig{ExtendEvery: -time.Second}, "inbox: ConsumerConfig.ExtendEvery is -1s: use more than 0, or 0 for 10s"},
		{inbox.ConsumerConfig{CleanupEvery: -time.Second}, "inbox: ConsumerConfig.CleanupEvery is -1s: use more than 0, or 0 for 1h0m0s"},
		{inbox.ConsumerConfig{ReplayEvery: -time.Second}, "inbox: ConsumerConfig.ReplayEvery is -1s: use more than 0, or 0 for 5s"},
		{inbox.ConsumerConfig{ShutdownTimeout: -time.Second}, "inbox: ConsumerConfig.ShutdownTimeout is -1s: use more than 0, or 0 for 10s"},
		{inbox.ConsumerConfig{Group: inbox.GroupConfig{MaxMessages: -1}}, "inbox: ConsumerConfig.Group.MaxMessages is -1: use more than 0, or 0 for 1"},
		{inbox.ConsumerConfig{Group: inbox.GroupConfig{SlowRun: -time.Second}}, "inbox: ConsumerConfig.Group.SlowRun is -1s: use more than 0, or 0 for 1s"},
		{inbox.ConsumerConfig{Group: inbox.GroupConfig{MaxWait: -time.Second}}, "inbox: ConsumerConfig.Group.MaxWait is -1s: it must be 0 (a group closes when nothing else waits) or positive"},
	} {
		if err := c.cfg.Validate(); err == nil || err.Error() != c.want {
			t.Errorf("Validate: %v, want %q", err, c.want)
		}
		if _, err := inbox.NewConsumer(ib, noSubscriber{}, d.ConsumerStore(), h, c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewConsumer: %v, want %q", err, c.want)
		}
	}
}
