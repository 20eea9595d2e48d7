package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/courier-go/courier/audit"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/brokerurl"
	"github.com/courier-go/courier/health"
	"github.com/courier-go/courier/metrics"
	"github.com/courier-go/courier/store/dburl"
)

// watchFlags are the continuous audit's flags that `courier audit
// --watch` (as they are) and `courier relay --audit` (as --audit-…)
// share; watchSpec.config holds their rules for both.
type watchFlags struct {
	Interval time.Duration `help:"Time between passes of the continuous audit." default:"15s" env:"INTERVAL"`
	Remember time.Duration `help:"How long the continuous audit remembers the messages it read, to tell a duplicate or an order break from a first copy (memory: some 350 bytes a message)." default:"10m" env:"REMEMBER"`
	Name     string        `help:"Name the continuous audit's state is saved under, for courier status and the dashboard (default: nats:STREAM or kafka:TOPICS, from what it reads)." env:"NAME"`
	Reset    bool          `help:"Forget what the continuous audit saved (its counts, findings and where it stopped judging) and start afresh; without it, a restarted watch takes up its saved state, alarms included." env:"RESET"`
}

// watchSpec is what a continuous audit is asked, with the names of the
// flags that ask it (for errors).
type watchSpec struct {
	flags watchFlags
	// prefix is how the flags of watchFlags are named: "--" or
	// "--audit-".
	prefix string
	// since and slack, and the flags that give them.
	since, slack         time.Duration
	sinceFlag, slackFlag string
	// brokerFlag names the flag of the broker's URL, u.
	brokerFlag string
	u          brokerurl.URL
	// stream and topics are what is read (NATS, Kafka).
	stream string
	topics []string
	// topicFlag names the flag that gives topics.
	topicFlag string
}

// config checks the spec and returns the watch's configuration (without
// its Save, Observer and Logger).
func (s watchSpec) config() (audit.WatchConfig, error) {
	f := s.flags
	switch {
	case f.Interval <= 0:
		return audit.WatchConfig{}, fmt.Errorf("%sinterval is %s: use a positive duration, such as 15s", s.prefix, f.Interval)
	case f.Remember < f.Interval:
		return audit.WatchConfig{}, fmt.Errorf("%sremember (%s) is shorter than %sinterval (%s): remember at least one interval, such as 10m", s.prefix, f.Remember, s.prefix, f.Interval)
	case s.since < 0:
		return audit.WatchConfig{}, fmt.Errorf("%s is %s: use a positive duration, or leave it out to start %sremember ago", s.sinceFlag, s.since, s.prefix)
	case s.slack < 0:
		return audit.WatchConfig{}, fmt.Errorf("%s is %s: use a positive duration (default %s for a continuous audit)", s.slackFlag, s.slack, audit.DefaultWatchSlack)
	}
	if err := s.u.CanReadBack(); err != nil {
		return audit.WatchConfig{}, fmt.Errorf("cannot audit %s (%s): %w", s.u.Where, s.brokerFlag, err)
	}
	if s.u.Kind == "kafka" && len(s.topics) == 0 {
		return audit.WatchConfig{}, fmt.Errorf("%s %s is a Kafka cluster, which keeps no list of Courier's topics: name the topics to audit with %s", s.brokerFlag, s.u.Where, s.topicFlag)
	}
	cfg := audit.WatchConfig{Name: f.Name, Broker: s.u.Where, Interval: f.Interval, Remember: f.Remember, Since: s.since, Slack: s.slack}
	switch s.u.Kind {
	case "nats":
		cfg.Broker += " stream " + s.stream
		if cfg.Name == "" {
			cfg.Name = "nats:" + s.stream
		}
	case "kafka":
		cfg.Broker += " topics " + strings.Join(s.topics, ",")
		if cfg.Name == "" {
			cfg.Name = "kafka:" + strings.Join(s.topics, ",")
		}
	}
	if cfg.Since == 0 {
		cfg.Since = cfg.Remember
	}
	if cfg.Slack == 0 {
		cfg.Slack = audit.DefaultWatchSlack
	}
	return cfg, cfg.Validate()
}

// startWatch makes the watch of r on d and runs it until the returned
// stop is called or ctx ends; col, if set, gets its metrics. Ready is its
// /readyz check.
// With reset it first forgets the watch's saved state.
func startWatch(ctx context.Context, e *env, d *dburl.DB, r broker.Reader, cfg audit.WatchConfig, reset bool, col *metrics.Collector) (w *audit.Watcher, stop func(), err error) {
	cfg.Save = d.Delivery()
	if reset {
		had, err := cfg.Save.DeleteWatch(ctx, cfg.Name)
		if err != nil {
			return nil, nil, fmt.Errorf("forget the watch %s: %w", cfg.Name, err)
		}
		e.log.Info("the watch's saved state is forgotten", "watch", cfg.Name, "had_one", had)
	}
	cfg.Logger = e.log
	if col != nil {
		cfg.Observer = col.Audit()
	}
	if w, err = audit.NewWatcher(d.Operations(), r, cfg); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(ctx) // ctx's end: its error says nothing
	}()
	e.log.Info("auditing continuously", "watch", cfg.Name, "broker", cfg.Broker, "database", d.String(),
		"interval", cfg.Interval, "remember", cfg.Remember, "since", cfg.Since, "slack", cfg.Slack)
	return w, func() { cancel(); <-done }, nil
}

// watchCmdFlags are `courier audit`'s flags of --watch.
type watchCmdFlags struct {
	Watch       bool `help:"Audit continuously, until stopped (SIGINT/SIGTERM): a pass every --interval judges what was published since the last one, remembers what it read for --remember, saves its state in the database (courier status, the dashboard) and logs each finding once. --slack defaults to 5s with it." env:"COURIER_AUDIT_WATCH"`
	watchFlags  `embed:"" envprefix:"COURIER_AUDIT_"`
	WatchSince  time.Duration `name:"watch-since" help:"With --watch: how far back the first pass starts (default: --remember)." env:"COURIER_AUDIT_WATCH_SINCE"`
	MetricsAddr string        `name:"metrics-addr" help:"With --watch: serve /metrics (the courier_audit_ series), /healthz and /readyz (the watch's state) on this address, such as :9465 (port 0: any free port, logged). Empty: not served." env:"COURIER_METRICS_ADDR"`
	AllowedHost []string      `name:"metrics-allowed-host" placeholder:"NAME" help:"Host name, besides localhost and the address --metrics-addr listens on, that requests to its endpoints may name (a proxy's, a Service's). Repeatable, or comma-separated." env:"COURIER_METRICS_ALLOWED_HOSTS"`
}

// observeFlags are the endpoints' flags as `courier relay` reads them.
func (f watchCmdFlags) observeFlags() observeFlags {
	return observeFlags{MetricsAddr: f.MetricsAddr, AllowedHost: f.AllowedHost, StatsInterval: metrics.DefaultMinInterval, MaxTopics: metrics.DefaultMaxTopics}
}

// runWatch audits continuously until e's context ends (SIGINT/SIGTERM),
// then returns nil.
func (c *auditCmd) runWatch(e *env) error {
	if c.From != "" || c.Until != "" {
		return errors.New("--from and --until give a one-shot audit's window: leave them out with --watch (--watch-since says where its first pass starts)")
	}
	opts := c.brokerOptions(e)
	u, err := brokerurl.Parse(c.BrokerURL, opts)
	if err != nil {
		return err
	}
	topics := splitList(c.Topic)
	cfg, err := watchSpec{flags: c.watchFlags, prefix: "--", since: c.WatchSince, sinceFlag: "--watch-since", slack: c.Slack, slackFlag: "--slack",
		brokerFlag: "--broker-url", u: u, stream: c.Stream, topics: topics, topicFlag: "--topic"}.config()
	if err != nil {
		return err
	}
	cfg.Examples = c.Examples
	of := c.observeFlags()
	if err := of.check(); err != nil {
		return err
	}
	d, b, r, closeSides, err := c.sides(e, opts, topics)
	if err != nil {
		return err
	}
	defer closeSides()
	var col *metrics.Collector
	var obs *observer
	if c.MetricsAddr != "" {
		if col, err = metrics.New(metrics.Config{}); err != nil {
			return err
		}
		if obs, err = of.listenWith(col); err != nil {
			return err
		}
		defer obs.ln.Close()
	}
	w, stop, err := startWatch(e.ctx, e, d, r, cfg, c.Reset, col)
	if err != nil {
		return err
	}
	defer stop()
	if obs != nil {
		stopServing, err := obs.start(e, health.Config{Database: d, StatusChecks: map[string]func(context.Context) (string, error){"audit": w.Ready}}, b)
		if err != nil {
			return err
		}
		defer stopServing()
	}
	<-e.ctx.Done()
	e.log.Info("continuous audit stopped", "watch", cfg.Name)
	return nil
}

// brokerOptions says how brokerurl reads and opens --broker-url: an audit
// reads, it creates no stream and declares nothing.
func (c *auditCmd) brokerOptions(e *env) brokerurl.Options {
	return brokerurl.Options{
		Flag: "--broker-url", Env: "COURIER_BROKER_URL", Logger: e.log,
		SubjectPrefix: c.SubjectPrefix, NoPrefix: c.SubjectPrefix == "", KeySubjects: c.KeySubjects,
		Stream:   c.Stream,
		NoCreate: true, ReadBack: true,
	}
}
