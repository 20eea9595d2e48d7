package kafka_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier/broker/cloudevents"
	"github.com/courier-go/courier/broker/kafka"
)

// Zero fields take their defaults; a negative one or a missing required one
// is refused with an error naming the field and the fix, by Validate and by
// the constructor alike, before anything reaches the cluster.
func TestConfigValidate(t *testing.T) {
	cfg := kafka.Config{Brokers: []string{"127.0.0.1:9"}}
	if err := (kafka.PublisherConfig{Config: cfg}).Validate(); err != nil {
		t.Errorf("PublisherConfig with brokers: %v", err)
	}
	if err := (kafka.SubscriberConfig{Config: cfg, Group: "g", Topics: []string{"orders"}}).Validate(); err != nil {
		t.Errorf("SubscriberConfig with brokers, group and topics: %v", err)
	}
	if err := (kafka.TopicConfig{}).Validate(); err != nil {
		t.Errorf("zero TopicConfig: %v", err)
	}
	pub := func(c kafka.PublisherConfig) func() error {
		return func() error {
			p, err := kafka.NewPublisher(c)
			if err == nil {
				p.Close()
			}
			return err
		}
	}
	sub := func(c kafka.SubscriberConfig) func() error {
		return func() error {
			s, err := kafka.NewSubscriber(context.Background(), c)
			if err == nil {
				_ = s.Close()
			}
			return err
		}
	}
	topic := func(c kafka.TopicConfig) func() error {
		// A nil client: a request would panic, so an error proves none is made.
		return func() error { return kafka.EnsureTopic(context.Background(), nil, cfg, "orders", c) }
	}
	for name, tc := range map[string]struct {
		validate, open func() error
		says           string
	}{
		"no brokers":               {kafka.PublisherConfig{}.Validate, pub(kafka.PublisherConfig{}), "Config.Brokers"},
		"negative AckTimeout":      {kafka.PublisherConfig{Config: cfg, AckTimeout: -time.Second}.Validate, pub(kafka.PublisherConfig{Config: cfg, AckTimeout: -time.Second}), "PublisherConfig.AckTimeout"},
		"negative MaxMessageBytes": {kafka.PublisherConfig{Config: cfg, MaxMessageBytes: -1}.Validate, pub(kafka.PublisherConfig{Config: cfg, MaxMessageBytes: -1}), "PublisherConfig.MaxMessageBytes"},
		"huge MaxMessageBytes":     {kafka.PublisherConfig{Config: cfg, MaxMessageBytes: 1 << 31}.Validate, pub(kafka.PublisherConfig{Config: cfg, MaxMessageBytes: 1 << 31}), "PublisherConfig.MaxMessageBytes"},
		"CloudEvents without source": {kafka.PublisherConfig{Config: cfg, CloudEvents: &cloudevents.Config{}}.Validate,
			pub(kafka.PublisherConfig{Config: cfg, CloudEvents: &cloudevents.Config{}}), "PublisherConfig.CloudEvents.Source"},
		"no group":  {kafka.SubscriberConfig{Config: cfg, Topics: []string{"o"}}.Validate, sub(kafka.SubscriberConfig{Config: cfg, Topics: []string{"o"}}), "SubscriberConfig.Group"},
		"no topics": {kafka.SubscriberConfig{Config: cfg, Group: "g"}.Validate, sub(kafka.SubscriberConfig{Config: cfg, Group: "g"}), "SubscriberConfig.Topics"},
		"negative Prefetch": {kafka.SubscriberConfig{Config: cfg, Group: "g", Topics: []string{"o"}, Prefetch: -1}.Validate,
			sub(kafka.SubscriberConfig{Config: cfg, Group: "g", Topics: []string{"o"}, Prefetch: -1}), "SubscriberConfig.Prefetch"},
		"negative Partitions":        {kafka.TopicConfig{Partitions: -1}.Validate, topic(kafka.TopicConfig{Partitions: -1}), "TopicConfig.Partitions"},
		"negative ReplicationFactor": {kafka.TopicConfig{ReplicationFactor: -1}.Validate, topic(kafka.TopicConfig{ReplicationFactor: -1}), "TopicConfig.ReplicationFactor"},
		"huge ReplicationFactor":     {kafka.TopicConfig{ReplicationFactor: 1 << 16}.Validate, topic(kafka.TopicConfig{ReplicationFactor: 1 << 16}), "TopicConfig.ReplicationFactor"},
	} {
		for how, f := range map[string]func() error{"Validate": tc.validate, "constructor": tc.open} {
			err := f()
			if err == nil || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), ": ") {
				t.Errorf("%s, %s: %v; want an error naming %s and the fix", name, how, err, tc.says)
			}
		}
	}
}
