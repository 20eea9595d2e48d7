package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Env is one system's private corner of the shared services for one
// measurement: a fresh PostgreSQL schema and a fresh JetStream stream with
// subjects of its own. It is created by newEnv and removed by Env.Close.
//
// Env is serialised to JSON and handed to a child process for drains, so
// its exported fields are all a relay needs to find its data.
type Env struct {
	// System names the system under test ("courier", "watermill", "river").
	System string `json:"system"`
	// Schema is the PostgreSQL schema holding the system's tables.
	Schema string `json:"schema"`
	// URL connects to the database with search_path set to Schema.
	URL string `json:"url"`
	// RelayURL is URL with an application_name that identifies the relay's
	// connections in pg_stat_activity (used to read their backends' CPU).
	RelayURL string `json:"relay_url"`
	// AppName is the application_name in RelayURL.
	AppName string `json:"app_name"`
	// NATSURL is the NATS server's URL.
	NATSURL string `json:"nats_url"`
	// Stream is the JetStream stream capturing Prefix+">"; empty when the
	// measurement publishes to another broker (see newSchemaEnv).
	Stream string `json:"stream"`
	// Prefix is the subject prefix, ending with a dot.
	Prefix string `json:"prefix"`

	// Pool is a pool on URL for preparing, filling and writing (parent
	// process only).
	Pool *pgxpool.Pool `json:"-"`

	admin *pgxpool.Pool
	token string // the random part of the names
}

// Topic is the topic (Courier) or destination topic (Watermill) every
// benchmark message is sent to.
const Topic = "events"

// Subject is the NATS subject the benchmark messages end up on.
func (e *Env) Subject() string { return e.Prefix + Topic }

// randomToken returns n random bytes in hex.
func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// withParams returns the PostgreSQL URL base with the query parameters kv
// (pairs of name and value) set. sslmode=disable is always set: the local
// server speaks no TLS.
func withParams(base string, kv ...string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || !strings.HasPrefix(u.Scheme, "postgres") {
		return "", fmt.Errorf("not a postgres:// URL: %q", base)
	}
	q := u.Query()
	q.Set("sslmode", "disable")
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// newPool opens a pgx pool on url with at most maxConns connections.
func newPool(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
	return pgxpool.NewWithConfig(ctx, cfg)
}

// newEnv creates a schema and a stream for one measurement of system;
// tune, if given, changes the stream's settings before it is created. The
// stream is created as Courier's EnsureStream creates it, for every
// system: allowing atomic batches on a server that takes them (2.12 and
// later), which only Courier's publisher uses.
func newEnv(ctx context.Context, admin *pgxpool.Pool, pgURL, natsURL, system string, tune ...func(*jetstream.StreamConfig)) (*Env, error) {
	atomic, _, err := brokerStreamTune(natsURL, 1)
	if err != nil {
		return nil, err
	}
	tune = append([]func(*jetstream.StreamConfig){atomic}, tune...)
	e, err := newSchemaEnv(ctx, admin, pgURL, natsURL, system)
	if err != nil {
		return nil, err
	}
	e.Stream = strings.ToUpper("BENCH_" + system + "_" + e.token)
	if err := createStream(ctx, natsURL, e.Stream, e.Prefix+">", tune...); err != nil {
		e.Stream = ""
		e.Close()
		return nil, err
	}
	return e, nil
}

// newSchemaEnv creates only a schema, no stream, for one measurement of
// system whose messages go to another broker than JetStream (Stream is
// empty; Prefix is set all the same).
func newSchemaEnv(ctx context.Context, admin *pgxpool.Pool, pgURL, natsURL, system string) (*Env, error) {
	tok := randomToken(4)
	e := &Env{
		System:  system,
		Schema:  "bench_" + system + "_" + tok,
		NATSURL: natsURL,
		Prefix:  "bench" + system + tok + ".",
		AppName: "bench-relay-" + tok,
		admin:   admin,
		token:   tok,
	}
	var err error
	if e.URL, err = withParams(pgURL, "search_path", e.Schema, "application_name", "bench-"+tok); err != nil {
		return nil, err
	}
	if e.RelayURL, err = withParams(pgURL, "search_path", e.Schema, "application_name", e.AppName); err != nil {
		return nil, err
	}
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+e.Schema); err != nil {
		return nil, fmt.Errorf("create schema: %w", err)
	}
	if e.Pool, err = newPool(ctx, e.URL, 40); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// newStreamEnv creates only a stream, no PostgreSQL schema, for a
// measurement of system whose data lives in another database; tune, if
// given, changes the stream's settings before it is created.
func newStreamEnv(ctx context.Context, natsURL, system string, tune ...func(*jetstream.StreamConfig)) (*Env, error) {
	tok := randomToken(4)
	e := &Env{
		System:  system,
		NATSURL: natsURL,
		Stream:  strings.ToUpper("BENCH_" + system + "_" + tok),
		Prefix:  "bench" + system + tok + ".",
	}
	if err := createStream(ctx, natsURL, e.Stream, e.Prefix+">", tune...); err != nil {
		return nil, err
	}
	return e, nil
}

// createStream creates a file-backed stream with a two-minute duplicate
// window (the settings Courier's EnsureStream uses), identical for every
// system unless tune changes them (the adversity section's streams).
func createStream(ctx context.Context, natsURL, name, subjects string, tune ...func(*jetstream.StreamConfig)) error {
	nc, err := natsgo.Connect(natsURL)
	if err != nil {
		return fmt.Errorf("connect to nats: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cfg := jetstream.StreamConfig{
		Name:       name,
		Subjects:   []string{subjects},
		Storage:    jetstream.FileStorage,
		Duplicates: 2 * time.Minute,
	}
	for _, t := range tune {
		t(&cfg)
	}
	_, err = js.CreateStream(ctx, cfg)
	if err != nil {
		return fmt.Errorf("create stream %s: %w", name, err)
	}
	return nil
}

// Close drops the schema (if any) and deletes the stream (if any).
func (e *Env) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if e.Pool != nil {
		e.Pool.Close()
	}
	if e.Schema != "" {
		if _, err := e.admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+e.Schema+" CASCADE"); err != nil {
			logf("warning: drop schema %s: %v", e.Schema, err)
		}
	}
	if e.Stream == "" {
		return
	}
	nc, err := natsgo.Connect(e.NATSURL)
	if err != nil {
		logf("warning: delete stream %s: %v", e.Stream, err)
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err == nil {
		err = js.DeleteStream(ctx, e.Stream)
	}
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		logf("warning: delete stream %s: %v", e.Stream, err)
	}
}

// streamCount returns the number of messages in the env's stream.
func streamCount(ctx context.Context, nc *natsgo.Conn, stream string) (uint64, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}
