package amqp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/amqp"
	"github.com/courier-go/courier/broker/cloudevents"
)

// Zero fields take their defaults; a negative one, a missing required one
// or a contradiction is refused with an error naming the field and the fix,
// by Validate and by the constructor alike, before anything connects (the
// URL points where nothing listens, so a dial would fail otherwise).
func TestConfigValidate(t *testing.T) {
	cfg := amqp.Config{URL: "amqp://guest:guest@127.0.0.1:1/"}
	if err := (amqp.PublisherConfig{Config: cfg}).Validate(); err != nil {
		t.Errorf("PublisherConfig with a URL: %v", err)
	}
	if err := (amqp.SubscriberConfig{Config: cfg, Queue: "q"}).Validate(); err != nil {
		t.Errorf("SubscriberConfig with a URL and a queue: %v", err)
	}
	if err := (amqp.Config{URL: cfg.URL, Backoff: courier.Backoff{Initial: 10 * time.Second}}).Validate(); err != nil {
		t.Errorf("Backoff.Initial above the default Max: %v", err)
	}
	with := func(f func(*amqp.Config)) amqp.Config {
		c := cfg
		f(&c)
		return c
	}
	pub := func(c amqp.PublisherConfig) func() error {
		return func() error {
			p, err := amqp.NewPublisher(c)
			if err == nil {
				_ = p.Close()
			}
			return err
		}
	}
	sub := func(c amqp.SubscriberConfig) func() error {
		return func() error {
			s, err := amqp.NewSubscriber(context.Background(), c)
			if err == nil {
				_ = s.Close()
			}
			return err
		}
	}
	topo := func(c amqp.Config, tp amqp.Topology) func() error {
		return func() error { return amqp.EnsureTopology(context.Background(), c, tp) }
	}
	for name, tc := range map[string]struct {
		validate, open func() error
		says           string
	}{
		"no URL":                     {amqp.Config{}.Validate, pub(amqp.PublisherConfig{}), "Config.URL"},
		"bad URL":                    {amqp.Config{URL: "amqp://h:port/"}.Validate, sub(amqp.SubscriberConfig{Config: amqp.Config{URL: "amqp://h:port/"}, Queue: "q"}), "Config.URL"},
		"DialTimeout":                {with(func(c *amqp.Config) { c.DialTimeout = -time.Second }).Validate, topo(with(func(c *amqp.Config) { c.DialTimeout = -time.Second }), amqp.Topology{}), "Config.DialTimeout"},
		"Heartbeat":                  {with(func(c *amqp.Config) { c.Heartbeat = -time.Second }).Validate, pub(amqp.PublisherConfig{Config: with(func(c *amqp.Config) { c.Heartbeat = -time.Second })}), "Config.Heartbeat"},
		"Backoff":                    {with(func(c *amqp.Config) { c.Backoff.Initial = -time.Second }).Validate, pub(amqp.PublisherConfig{Config: with(func(c *amqp.Config) { c.Backoff.Initial = -time.Second })}), "Config.Backoff"},
		"Backoff.Max":                {with(func(c *amqp.Config) { c.Backoff = courier.Backoff{Initial: time.Second, Max: time.Millisecond} }).Validate, pub(amqp.PublisherConfig{Config: with(func(c *amqp.Config) { c.Backoff = courier.Backoff{Initial: time.Second, Max: time.Millisecond} })}), "Config.Backoff"},
		"Jitter":                     {with(func(c *amqp.Config) { c.Backoff.Jitter = 1.5 }).Validate, sub(amqp.SubscriberConfig{Config: with(func(c *amqp.Config) { c.Backoff.Jitter = 1.5 }), Queue: "q"}), "Config.Backoff.Jitter"},
		"Channels":                   {amqp.PublisherConfig{Config: cfg, Channels: -1}.Validate, pub(amqp.PublisherConfig{Config: cfg, Channels: -1}), "PublisherConfig.Channels"},
		"Confirm":                    {amqp.PublisherConfig{Config: cfg, ConfirmTimeout: -time.Second}.Validate, pub(amqp.PublisherConfig{Config: cfg, ConfirmTimeout: -time.Second}), "PublisherConfig.ConfirmTimeout"},
		"MaxSize":                    {amqp.PublisherConfig{Config: cfg, MaxMessageSize: -1}.Validate, pub(amqp.PublisherConfig{Config: cfg, MaxMessageSize: -1}), "PublisherConfig.MaxMessageSize"},
		"CloudEvents":                {amqp.PublisherConfig{Config: cfg, CloudEvents: &cloudevents.Config{}}.Validate, pub(amqp.PublisherConfig{Config: cfg, CloudEvents: &cloudevents.Config{}}), "PublisherConfig.CloudEvents.Source"},
		"no queue":                   {amqp.SubscriberConfig{Config: cfg}.Validate, sub(amqp.SubscriberConfig{Config: cfg}), "SubscriberConfig.Queue"},
		"Prefetch":                   {amqp.SubscriberConfig{Config: cfg, Queue: "q", Prefetch: -1}.Validate, sub(amqp.SubscriberConfig{Config: cfg, Queue: "q", Prefetch: -1}), "SubscriberConfig.Prefetch"},
		"DeliveryLimit":              {amqp.Topology{Queue: "q", DeliveryLimit: -1}.Validate, topo(cfg, amqp.Topology{Queue: "q", DeliveryLimit: -1}), "Topology.DeliveryLimit"},
		"Topics without a queue":     {amqp.Topology{Topics: []string{"orders"}}.Validate, topo(cfg, amqp.Topology{Topics: []string{"orders"}}), "Topology.Queue"},
		"Heartbeat in the URL":       {amqp.Config{URL: cfg.URL + "?heartbeat=5"}.Validate, sub(amqp.SubscriberConfig{Config: amqp.Config{URL: cfg.URL + "?heartbeat=5"}, Queue: "q", Partitions: 4}), "set Config.Heartbeat instead"},
		"Heartbeat under 1s":         {with(func(c *amqp.Config) { c.Heartbeat = 500 * time.Millisecond }).Validate, sub(amqp.SubscriberConfig{Config: with(func(c *amqp.Config) { c.Heartbeat = 500 * time.Millisecond }), Queue: "q"}), "whole seconds"},
		"Partitions":                 {amqp.Topology{Queue: "q", Partitions: -1}.Validate, topo(cfg, amqp.Topology{Queue: "q", Partitions: -1}), "Topology.Partitions is -1"},
		"Partitions without a queue": {amqp.Topology{Partitions: 4}.Validate, topo(cfg, amqp.Topology{Partitions: 4}), "Topology.Partitions without Topology.Queue"},
		"Subscriber Partitions":      {amqp.SubscriberConfig{Config: cfg, Queue: "q", Partitions: -2}.Validate, sub(amqp.SubscriberConfig{Config: cfg, Queue: "q", Partitions: -2}), "SubscriberConfig.Partitions is -2"},
		"MemberTimeout":              {amqp.SubscriberConfig{Config: cfg, Queue: "q", Partitions: 4, MemberTimeout: time.Second}.Validate, sub(amqp.SubscriberConfig{Config: cfg, Queue: "q", Partitions: 4, MemberTimeout: time.Second}), "MemberTimeout is 1s"},
	} {
		for how, f := range map[string]func() error{"Validate": tc.validate, "constructor": tc.open} {
			err := f()
			if err == nil || !strings.Contains(err.Error(), tc.says) || strings.Contains(err.Error(), "connect") {
				t.Errorf("%s, %s: %v; want an error naming %s, without connecting", name, how, err, tc.says)
			}
		}
	}
}
