package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/courier-go/courier/audit"
	"github.com/courier-go/courier/broker/brokerurl"
	"github.com/courier-go/courier/metrics"
	"github.com/courier-go/courier/store/dburl"
)

// relayAudit are `courier relay`'s flags of --audit, named --audit-…: the
// continuous audit of `courier audit --watch`, run inside the relay
// against its own broker.
type relayAudit struct {
	watchFlags `embed:""`
	Since      time.Duration `help:"With --audit: how far back the first pass starts (default: --audit-remember)." env:"SINCE"`
	Slack      time.Duration `help:"With --audit: how far beyond each pass both sides are read, and how long a pass waits before it judges what was published." default:"5s" env:"SLACK"`
	Topic      []string      `help:"With --audit on Kafka: the topics to audit (Kafka keeps no list of Courier's topics); repeat or separate with commas." env:"TOPICS"`
}

// checkAudit validates the flags of --audit, before anything is opened.
func (c *relayCmd) checkAudit() error {
	if !c.Audit {
		return nil
	}
	switch {
	case !c.KeepPublished:
		return errors.New("--audit needs --keep-published: the audit compares the copies the relay keeps of what it published with what the broker holds (trim them with --cleanup-every and --cleanup-keep-published)")
	case c.tenanted():
		return errors.New("--audit audits one database: with tenants, run courier audit --watch per tenant")
	}
	raw := c.BrokerURL
	if raw == "" {
		raw = "nats://127.0.0.1:4222" // the embedded server, wherever it listens
	}
	u, err := brokerurl.Parse(raw, c.brokerOptions(nil))
	if err != nil {
		return err
	}
	if err := u.CanReadBack(); err != nil {
		return fmt.Errorf("--audit cannot audit %s: %w; leave --audit out (the relay runs without it)", u.Where, err)
	}
	_, err = c.auditSpec(u).config()
	return err
}

// auditSpec is what --audit asks of the broker u.
func (c *relayCmd) auditSpec(u brokerurl.URL) watchSpec {
	a := c.AuditWatch
	return watchSpec{flags: a.watchFlags, prefix: "--audit-", since: a.Since, sinceFlag: "--audit-since", slack: a.Slack, slackFlag: "--audit-slack",
		brokerFlag: "--broker-url", u: u, stream: c.Stream, topics: splitList(a.Topic), topicFlag: "--audit-topic"}
}

// startAudit starts the watch of --audit on the relay's broker b and
// database d, reporting to col when set. Without --audit it returns a nil
// Watcher and a stop that does nothing.
func (c *relayCmd) startAudit(e *env, d *dburl.DB, b *brokerurl.Broker, col *metrics.Collector) (*audit.Watcher, func(), error) {
	if !c.Audit {
		return nil, func() {}, nil
	}
	spec := c.auditSpec(brokerurl.URL{Kind: b.Kind(), Where: b.String()})
	cfg, err := spec.config()
	if err != nil {
		return nil, nil, err
	}
	r, err := b.Reader(e.ctx, spec.topics)
	if err != nil {
		return nil, nil, fmt.Errorf("--audit: %w", err)
	}
	return startWatch(e.ctx, e, d, r, cfg, c.AuditWatch.Reset, col)
}
