// Command courier runs and inspects Courier: it migrates the database schema,
// relays outbox messages to the broker and reports the outbox's state.
//
//	courier migrate --database-url postgres://localhost/app
//	courier relay   --database-url postgres://localhost/app --broker-url nats://localhost:4222
//	courier relay   --database-url postgres://localhost/app --broker-url kafka://k1:9092,k2:9092
//	courier relay   --database-url postgres://localhost/app --broker-url amqp://guest:guest@localhost:5672/
//	COURIER_WEBHOOK_SECRET=whsec_… courier relay --database-url … --broker-url https://hooks.example.com/courier
//	courier status  --database-url postgres://localhost/app --fail-if-oldest 5m --fail-if-dead-letters
//	courier reconcile --database-url postgres://localhost/app --repair
//	courier cleanup --database-url postgres://localhost/app --keep-published 168h --keep-inbox-markers 720h
//	courier scheduled list --database-url postgres://localhost/app --due-within 1h
//	courier dashboard --database-url postgres://localhost/app --addr 127.0.0.1:8080
//
// Every flag can also be set through the environment variable named in
// `courier <command> --help` (COURIER_DATABASE_URL, COURIER_BROKER_URL, …).
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kong"

	"github.com/courier-go/courier/broker/brokerurl"
	"github.com/courier-go/courier/internal/escape"
)

// cli is the command line grammar.
type cli struct {
	LogFormat string `help:"Log format: text or json." enum:"text,json" default:"text" env:"COURIER_LOG_FORMAT"`
	LogLevel  string `help:"Log level: debug, info, warn or error." enum:"debug,info,warn,error" default:"info" env:"COURIER_LOG_LEVEL"`

	Migrate   migrateCmd   `cmd:"" help:"Create or upgrade Courier's tables, or print their SQL."`
	Relay     relayCmd     `cmd:"" help:"Move committed outbox messages to the broker until stopped (SIGINT/SIGTERM)."`
	Status    statusCmd    `cmd:"" help:"Show the outbox per topic, relays' leases, dead letters, consumers, sagas and idempotency keys; --fail-if-… for probes."`
	DLQ       dlqCmd       `cmd:"" name:"dlq" help:"List, show, group, replay, discard or export dead letters."`
	Scheduled scheduledCmd `cmd:"" help:"List or cancel scheduled messages that wait to fall due."`
	Demo      demoCmd      `cmd:"" help:"Run the reference shop under load and faults, then check its invariants (nothing to install)."`
	Shop      shopCmd      `cmd:"" help:"Run one service of the reference shop as a process of its own; several processes of one service share its keys with --partitions."`
	Version   versionCmd   `cmd:"" help:"Print the version."`

	Audit     auditCmd     `cmd:"" help:"Compare what the database says was published (--keep-published copies) with what the broker holds: lost messages, phantoms, duplicates, keys out of order; exit 1 on alarms."`
	Reconcile reconcileCmd `cmd:"" help:"Find what is stuck (ended leases, messages failing for long, overdue sagas, keys left in flight); --repair puts it right."`
	Cleanup   cleanupCmd   `cmd:"" help:"Delete old published copies, inbox markers, expired idempotency keys, finished sagas… in small batches."`
	Dashboard dashboardCmd `cmd:"" help:"Serve the web dashboard: the outbox per topic, relays, dead letters and parked messages (replay, discard), consumers, sagas, idempotency keys; on 127.0.0.1:8080 unless told."`
}

// env is what a command runs with.
type env struct {
	ctx    context.Context
	stdout io.Writer
	stderr io.Writer
	log    *slog.Logger
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// helpVars are the variables of the flags' help: broker_forms, the broker
// URLs of the registered broker kinds.
func helpVars() kong.Vars {
	return kong.Vars{"broker_forms": brokerurl.Forms()}
}

// exitCode carries kong's request to exit (after --help) out of Parse.
type exitCode int

// run executes one command line until it ends or the process receives
// SIGINT or SIGTERM, and returns the process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runContext(ctx, args, stdout, stderr)
}

// runContext executes one command line until it ends or ctx does, and
// returns the process exit code.
func runContext(ctx context.Context, args []string, stdout, stderr io.Writer) (code int) {
	var c cli
	parser, err := kong.New(&c,
		kong.Name("courier"),
		kong.Description("Courier: transactional outbox, relay and inbox for reliable messaging."),
		kong.Writers(stdout, stderr),
		kong.Exit(func(code int) { panic(exitCode(code)) }),
		helpVars(),
	)
	if err != nil {
		fmt.Fprintln(stderr, "courier:", err)
		return 2
	}
	defer func() {
		if r := recover(); r != nil {
			ec, ok := r.(exitCode)
			if !ok {
				panic(r)
			}
			code = int(ec)
		}
	}()
	kctx, err := parser.Parse(args)
	if err != nil {
		fmt.Fprintf(stderr, "courier: %v (see courier --help)\n", err)
		return 2
	}
	e := &env{ctx: ctx, stdout: stdout, stderr: stderr, log: newLogger(stderr, c.LogFormat, c.LogLevel)}
	if err := kctx.Run(e); err != nil {
		// Errors may quote what a database or broker said: escaped.
		fmt.Fprintln(stderr, "courier:", escape.Text(err.Error()))
		return 1
	}
	return 0
}

// newLogger logs to w in format. Both escape what a terminal would act on:
// slog's text handler quotes such values itself, and escape.JSONWriter
// escapes what its JSON handler leaves (C1 controls, format characters).
func newLogger(w io.Writer, format, level string) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: lv}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(escape.JSONWriter(w), opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
