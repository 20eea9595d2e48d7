package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier/broker/brokerurl"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/broker/nats/embedded"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/dburl"
)

type relayCmd struct {
	dbFlags
	cdcFlags
	observeFlags
	dashboardFlags
	fleetFlags
	BrokerURL        string        `name:"broker-url" help:"Broker to publish to; the URL picks it: ${broker_forms} (webhooks are signed with the secrets of --webhook-secret-env). Default: an embedded NATS JetStream server (see --data-dir)." env:"COURIER_BROKER_URL"`
	WebhookSecretEnv string        `name:"webhook-secret-env" help:"Environment variable holding the secrets that sign webhook requests (https:// --broker-url): whsec_… secrets, comma-separated during a rotation (the first is the new one). Never put them in the URL." default:"COURIER_WEBHOOK_SECRET" env:"COURIER_WEBHOOK_SECRET_ENV"`
	DataDir          string        `help:"Where the embedded NATS server keeps its stream." default:"courier-data" env:"COURIER_DATA_DIR"`
	EmbeddedPort     int           `help:"Port of the embedded NATS server (0: any free port)." default:"4222" env:"COURIER_EMBEDDED_PORT"`
	ListenURL        string        `name:"listen-url" help:"PostgreSQL URL for LISTEN wake-ups; must be a direct session connection, not PgBouncer in transaction mode (default: --database-url)." env:"COURIER_LISTEN_URL"`
	NoListen         bool          `help:"Do not LISTEN for wake-ups (PostgreSQL); poll only." env:"COURIER_NO_LISTEN"`
	Stream           string        `help:"JetStream stream to publish into (NATS)." default:"COURIER" env:"COURIER_STREAM"`
	SubjectPrefix    string        `help:"Prefix that turns a topic into a subject (NATS)." default:"courier." env:"COURIER_SUBJECT_PREFIX"`
	KeySubjects      bool          `name:"key-subjects" help:"End each message's subject with its key (NATS): topic orders and key o-42 go to courier.orders.o-42. Consumers that share the keys among their instances (nats.SubscriberConfig.Partitions) need it; their subscribers set nats.Config.KeySubjects too. The stream the relay creates takes both forms." env:"COURIER_KEY_SUBJECTS"`
	StreamReplicas   int           `name:"stream-replicas" help:"Servers of a NATS cluster that hold the stream the relay creates: 3 (or 5) on a cluster, so that an acknowledgement means a quorum stored the message." default:"1" env:"COURIER_STREAM_REPLICAS"`
	NoStream         bool          `name:"no-create-stream" help:"Do not create the stream (NATS) or declare the exchange (RabbitMQ) when it is missing (it is managed elsewhere)." env:"COURIER_NO_CREATE_STREAM"`
	BatchSize        int           `help:"Messages claimed per batch." default:"1000" env:"COURIER_BATCH_SIZE"`
	Concurrency      int           `help:"Batches publishing at once (with --mode cdc: Publish calls in flight, on disjoint keys)." default:"2" env:"COURIER_CONCURRENCY"`
	Lease            time.Duration `help:"How long claimed messages stay reserved; other relays take over after it." default:"30s" env:"COURIER_LEASE"`
	MaxAttempts      int           `help:"Failed attempts before a message becomes a dead letter." default:"10" env:"COURIER_MAX_ATTEMPTS"`
	HoldKeys         []string      `name:"hold-keys" placeholder:"TOPIC" help:"Topics whose dead letters hold their key: the key's later messages wait behind the dead letter (courier dlq shows it) until it is replayed (then they follow it, in order) or discarded (then they go on without it), instead of moving on. Comma-separated, or * for every topic." env:"COURIER_HOLD_KEYS"`
	PollInterval     time.Duration `help:"How often to look for work without a wake-up (default: 1s on PostgreSQL, 250ms on MySQL, 100ms on SQLite)." env:"COURIER_POLL_INTERVAL"`
	KeepPublished    bool          `help:"Keep a copy of every published message in courier_outbox_published (trim it with --cleanup-every and --cleanup-keep-published, or courier cleanup)." env:"COURIER_KEEP_PUBLISHED"`
	Cleanup          relayCleanup  `embed:"" prefix:"cleanup-" envprefix:"COURIER_CLEANUP_"`
	Audit            bool          `help:"Audit continuously what the relays publish, as courier audit --watch does, inside this relay: needs --keep-published and a broker that keeps what it is sent (NATS, Kafka); its state goes to the database (courier status, the dashboard), to /metrics and /readyz." env:"COURIER_RELAY_AUDIT"`
	AuditWatch       relayAudit    `embed:"" prefix:"audit-" envprefix:"COURIER_RELAY_AUDIT_"`
}

// check validates every flag, before anything is opened or created, and
// returns the relay's configuration (without its logger and notifier).
func (c *relayCmd) check() (relay.Config, error) {
	for _, f := range []struct {
		name string
		v    int
	}{{"--batch-size", c.BatchSize}, {"--concurrency", c.Concurrency}, {"--max-attempts", c.MaxAttempts}} {
		if f.v < 1 {
			return relay.Config{}, fmt.Errorf("%s is %d: use 1 or more", f.name, f.v)
		}
	}
	if c.BrokerURL != "" {
		if _, err := brokerurl.Parse(c.BrokerURL, c.brokerOptions(nil)); err != nil {
			return relay.Config{}, err
		}
	}
	if c.StreamReplicas < 1 || c.StreamReplicas > 5 {
		return relay.Config{}, fmt.Errorf("--stream-replicas is %d: use 1 to 5 (3 on a cluster of three or more servers)", c.StreamReplicas)
	}
	if c.EmbeddedPort < 0 || c.EmbeddedPort > 65535 {
		return relay.Config{}, fmt.Errorf("--embedded-port is %d: use a port from 1 to 65535, or 0 for any free port", c.EmbeddedPort)
	}
	if c.Stream == "" || strings.ContainsAny(c.Stream, " \t\r\n.*>/\\") {
		return relay.Config{}, fmt.Errorf("--stream %q is not a JetStream stream name: use letters, digits, - and _ (no spaces, '.', '*', '>' or slashes)", c.Stream)
	}
	if p := strings.TrimSuffix(c.SubjectPrefix, "."); c.SubjectPrefix != "" &&
		(strings.ContainsAny(c.SubjectPrefix, " \t\r\n*>") || p == "" || strings.HasPrefix(p, ".") || strings.Contains(p, "..")) {
		return relay.Config{}, fmt.Errorf("--subject-prefix %q cannot start a NATS subject: use tokens separated by dots, without spaces, '*' or '>', such as courier. (or \"\" for subjects equal to topics)", c.SubjectPrefix)
	}
	dialect, err := c.dialect()
	if err != nil {
		return relay.Config{}, err
	}
	if err := c.checkCDC(dialect); err != nil {
		return relay.Config{}, err
	}
	if err := c.observeFlags.check(); err != nil {
		return relay.Config{}, err
	}
	if err := c.dashboardFlags.check(); err != nil {
		return relay.Config{}, err
	}
	if c.PollInterval < 0 {
		return relay.Config{}, fmt.Errorf("--poll-interval is %s: use more than 0, or leave it out for the database's default", c.PollInterval)
	}
	cfg := relay.Config{
		BatchSize:     c.BatchSize,
		Concurrency:   c.Concurrency,
		LeaseDuration: c.Lease,
		MaxAttempts:   c.MaxAttempts,
		PollInterval:  c.PollInterval,
		HoldKeys:      c.HoldKeys,
	}
	if c.Lease <= time.Second {
		// Publishing a batch must end well within its lease: the relay
		// gives it half the lease and keeps a margin. (The relay would
		// take its default for 0; here 0 is a mistake like any other.)
		return relay.Config{}, fmt.Errorf("--lease is %s: use more than 1s (default 30s)", c.Lease)
	}
	if err := cfg.Validate(); err != nil {
		return relay.Config{}, flagError(err)
	}
	if err := c.Cleanup.check(); err != nil {
		return relay.Config{}, err
	}
	if err := c.checkAudit(); err != nil {
		return relay.Config{}, err
	}
	return cfg, nil
}

// Run runs the relay (polling, or with --mode cdc reading the log) until
// the command's context ends.
func (c *relayCmd) Run(e *env) error {
	cfg, err := c.check()
	if err != nil {
		return err
	}
	cfg.Logger = e.log
	if c.tenanted() {
		return c.runTenants(e, cfg)
	}
	if c.BrokerURL == "" {
		// Before anything else is created: the embedded server would only
		// fail to become ready in an unusable directory.
		if err := embedded.UsableDir(c.DataDir); err != nil {
			return fmt.Errorf("--data-dir: %v; give a directory you can write in (--data-dir or COURIER_DATA_DIR)", err)
		}
	}
	embeddedDB := c.DatabaseURL == ""
	d, err := c.openDatabase(e, embeddedDB)
	if err != nil {
		return err
	}
	defer d.Close()
	if cfg.PollInterval == 0 {
		cfg.PollInterval = d.PollInterval()
	}
	stopDashboard, err := c.dashboardFlags.serve(e, d)
	if err != nil {
		return err
	}
	defer stopDashboard()
	st, err := d.RelayStore(e.ctx, store.RelayConfig{KeepPublished: c.KeepPublished})
	if err != nil {
		return err
	}
	b, closeBroker, announceBroker, err := c.openBroker(e)
	if err != nil {
		return err
	}
	defer closeBroker()
	if c.Mode == "cdc" {
		if c.Cleanup.Every > 0 {
			defer backgroundCleanup(e, c.Cleanup.retentionFlags, c.Cleanup.tables, d.Operations(), c.Cleanup.Every)()
		}
		return c.runCDC(e, d, b)
	}
	r, stopObserving, err := c.newRelay(e, d, st, b, cfg)
	if err != nil {
		return err
	}
	defer stopObserving()
	// Where things are, once all is ready.
	if embeddedDB {
		e.log.Info("database: embedded SQLite file (the default; set --database-url for another)", "path", d.String())
	}
	announceBroker()
	c.logRelaying(e, d, b, cfg.PollInterval)
	if c.Cleanup.Every > 0 {
		defer backgroundCleanup(e, c.Cleanup.retentionFlags, c.Cleanup.tables, d.Operations(), c.Cleanup.Every)()
	}
	return r.Run(e.ctx)
}

// openDatabase opens --database-url, or the embedded SQLite file, which it
// creates and migrates.
func (c *relayCmd) openDatabase(e *env, embeddedDB bool) (*dburl.DB, error) {
	d, err := c.open(e.ctx, embeddedDB, c.ListenURL)
	if err != nil {
		return nil, err
	}
	if embeddedDB {
		if _, err := d.Migrate(e.ctx); err != nil {
			d.Close()
			return nil, err
		}
	}
	return d, nil
}

// openBroker opens --broker-url or, without it, starts the embedded NATS
// server in --data-dir and opens that. closeAll closes the broker and
// stops the server; announce logs where the embedded server listens (it
// does nothing for --broker-url).
func (c *relayCmd) openBroker(e *env) (b *brokerurl.Broker, closeAll, announce func(), err error) {
	brokerURL, stopServer, announce := c.BrokerURL, func() {}, func() {}
	if brokerURL == "" {
		dir, _ := filepath.Abs(c.DataDir)
		srv, err := embedded.Start(embedded.Config{Dir: dir, Port: c.EmbeddedPort})
		if err != nil {
			return nil, nil, nil, embeddedError(err, c.DataDir, c.EmbeddedPort)
		}
		brokerURL = srv.ClientURL()
		stopServer = func() {
			e.log.Info("embedded NATS stopped")
			srv.Shutdown()
		}
		announce = func() {
			e.log.Info("broker: embedded NATS JetStream (the default; set --broker-url for another); consumers connect here",
				"url", brokerURL, "data", dir)
		}
	}
	b, err = brokerurl.Open(e.ctx, brokerURL, c.brokerOptions(e.log))
	if err != nil {
		stopServer()
		var se *couriernats.StreamError
		if errors.As(err, &se) {
			return nil, nil, nil, c.streamError(se)
		}
		return nil, nil, nil, err
	}
	return b, func() { _ = b.Close(); stopServer() }, announce, nil
}

// embeddedError explains why the embedded NATS server in --data-dir dir
// (on --embedded-port port) did not start, with the fix. Relays of one
// database share one broker: a second relay joins the first one's server
// as a client rather than starting a server of its own, which would either
// share the first's store (and lose what both acknowledged) or split the
// outbox between two brokers.
func embeddedError(err error, dir string, port int) error {
	var inUse *embedded.DirInUseError
	switch {
	case errors.As(err, &inUse):
		who := "another courier process"
		if inUse.PID != 0 {
			who = fmt.Sprintf("courier process %d", inUse.PID)
		}
		join := "--broker-url with its URL (in its log once it has started)"
		if inUse.URL != "" {
			who += ", whose embedded NATS serves at " + inUse.URL
			join = "--broker-url " + inUse.URL
		}
		return fmt.Errorf("--data-dir %s is in use by %s: join it as a client with %s (relays of one database share one broker), or give this relay another --data-dir if it relays another database; two NATS servers on one directory lose what each acknowledged",
			dir, who, join)
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Errorf("%w; if a courier relay's embedded NATS listens there, join it as a client with --broker-url nats://127.0.0.1:%d (relays of one database share one broker); otherwise pass --embedded-port with a free port, or --broker-url to use a running NATS", err, port)
	}
	return fmt.Errorf("%w; pass --broker-url to use a running NATS", err)
}

// newRelay makes the polling relay, woken by the database's notifier
// (unless --no-listen) and reporting to the --metrics-addr endpoints,
// which it starts serving. stop stops serving them.
func (c *relayCmd) newRelay(e *env, d *dburl.DB, st store.RelayStore, b *brokerurl.Broker, cfg relay.Config) (r *relay.Relay, stop func(), err error) {
	if !c.NoListen {
		n, err := d.Notifier(e.log)
		if err != nil {
			return nil, nil, fmt.Errorf("--listen-url: %w", err)
		}
		if n != nil {
			cfg.Notifier = n
		}
	}
	obs, err := c.observeFlags.listen(d.Operations())
	if err != nil {
		return nil, nil, err
	}
	if obs == nil {
		if r, err = relay.New(st, b, cfg); err != nil {
			return nil, nil, flagError(err)
		}
		_, stopAudit, err := c.startAudit(e, d, b, nil)
		if err != nil {
			return nil, nil, err
		}
		return r, stopAudit, nil
	}
	cfg.Observer = obs.col.Relay()
	if r, err = relay.New(st, b, cfg); err != nil {
		_ = obs.ln.Close()
		return nil, nil, flagError(err)
	}
	w, stopAudit, err := c.startAudit(e, d, b, obs.col)
	if err != nil {
		_ = obs.ln.Close()
		return nil, nil, err
	}
	if w != nil {
		obs.checks = map[string]func(context.Context) (string, error){"audit": w.Ready}
	}
	stopServing, err := obs.serve(e, r, cfg, d, b)
	if err != nil {
		stopAudit()
		_ = obs.ln.Close()
		return nil, nil, err
	}
	return r, func() { stopServing(); _ = obs.ln.Close(); stopAudit() }, nil
}

// logRelaying logs where the relay reads and publishes: the broker adds
// its own fields (its kind's LogFields).
func (c *relayCmd) logRelaying(e *env, d *dburl.DB, b *brokerurl.Broker, pollInterval time.Duration) {
	where := []any{"database", d.String(), "dialect", d.Dialect(), "broker", b.String()}
	where = append(where, b.LogFields()...)
	e.log.Info("relaying", append(where, "poll_interval", pollInterval)...)
}

// brokerOptions says how brokerurl reads and opens --broker-url; log
// reports connection losses.
func (c *relayCmd) brokerOptions(log *slog.Logger) brokerurl.Options {
	return brokerurl.Options{
		Flag:             "--broker-url",
		Env:              "COURIER_BROKER_URL",
		Logger:           log,
		SubjectPrefix:    c.SubjectPrefix,
		NoPrefix:         c.SubjectPrefix == "",
		KeySubjects:      c.KeySubjects,
		Stream:           c.Stream,
		StreamReplicas:   c.StreamReplicas,
		NoCreate:         c.NoStream,
		Channels:         c.Concurrency,
		WebhookSecretEnv: c.WebhookSecretEnv,
	}
}

// streamError explains why the stream could not be created, with the fix.
func (c *relayCmd) streamError(se *couriernats.StreamError) error {
	switch {
	case se.Overlap != nil:
		which := "another stream"
		if len(se.Overlap) > 0 {
			which = "stream " + strings.Join(se.Overlap, ", ")
		}
		fix := "pass --stream with the name of the stream that captures them"
		if len(se.Overlap) == 1 {
			fix = "pass --stream " + se.Overlap[0] + " to publish into it"
		}
		return fmt.Errorf("cannot create stream %s: its subjects %s overlap those of %s; %s, or --subject-prefix for subjects of your own (--no-create-stream if streams are managed elsewhere)",
			c.Stream, se.Subjects, which, fix)
	case errors.Is(se.Err, jetstream.ErrJetStreamNotEnabled), errors.Is(se.Err, jetstream.ErrJetStreamNotEnabledForAccount):
		return fmt.Errorf("%v; enable JetStream on the server (nats-server -js)", se.Err)
	}
	return fmt.Errorf("%v; check that the server runs JetStream (nats-server -js) and that --stream and --subject-prefix suit it", se.Err)
}

// flagError rewrites "Config.BatchSize" in relay errors as the flag users set.
func flagError(err error) error {
	r := strings.NewReplacer(
		"relay: Config.BatchSize", "--batch-size",
		"relay: Config.Concurrency", "--concurrency",
		"relay: Config.LeaseDuration", "--lease",
		"relay: Config.MaxAttempts", "--max-attempts",
		"relay: Config.PollInterval", "--poll-interval",
		"relay: Config.HoldKeys", "--hold-keys",
		"cdc: Config.HoldKeys", "--hold-keys",
		"relay: Config.PublishTimeout", "the publish timeout (half of --lease, at most 10s)",
		"cdc: Config.Slot", "--slot",
		"cdc: Config.Publication", "--publication",
		"cdc: Config.BatchSize", "--batch-size",
		"cdc: Config.Concurrency", "--concurrency",
	)
	return errors.New(r.Replace(err.Error()))
}
