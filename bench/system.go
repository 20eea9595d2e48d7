package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// System is one transactional-outbox implementation under test: Courier or
// a peer. Every method works inside the Env it is given.
type System interface {
	// Name is the system's short name, as in the -systems flag.
	Name() string
	// Prepare creates the system's tables in env's schema.
	Prepare(ctx context.Context, env *Env) error
	// Fill writes n benchmark messages (message i has key keyFor(i, keys))
	// in transactions of 1000, without any relay running.
	Fill(ctx context.Context, env *Env, n, keys int) error
	// NewWriter returns what a business transaction uses to add one
	// message.
	NewWriter(ctx context.Context, env *Env) (Writer, error)
	// StartRelay starts the system's relay (its own database pool on
	// env.RelayURL and its own NATS connection) moving messages to env's
	// stream.
	StartRelay(ctx context.Context, env *Env) (Relay, error)
}

// Writer adds messages to business transactions.
type Writer interface {
	// Write adds one message with key and payload to tx and returns the id
	// that will arrive as the JetStream message's Nats-Msg-Id header.
	Write(ctx context.Context, tx pgx.Tx, key string, payload []byte) (string, error)
}

// Relay is a running relay.
type Relay interface {
	// Published counts messages the broker acknowledged so far.
	Published() int64
	// Settle waits until the relay's own bookkeeping for the first n
	// acknowledged messages is committed to the database (marked
	// published, acked offset, completed job).
	Settle(ctx context.Context, n int64) error
	// Stop stops the relay and releases its connections.
	Stop() error
}

// systemByName returns a new System for name.
func systemByName(name string) (System, error) {
	switch name {
	case "courier":
		return &courierSystem{}, nil
	case "watermill":
		return &watermillSystem{}, nil
	case "river":
		return &riverSystem{}, nil
	}
	return nil, fmt.Errorf("unknown system %q (want courier, watermill or river)", name)
}

// allSystems is every system, Courier first.
var allSystems = []string{"courier", "watermill", "river"}

// displayName is a system's name as printed in tables.
func displayName(system string) string {
	switch system {
	case "courier":
		return "Courier"
	case "watermill":
		return "Watermill"
	case "river":
		return "River"
	}
	return system
}

// Message shape shared by every system: about 200 bytes of JSON payload,
// a key, a type, a version, an occurrence time and a content type.
const (
	messageType = "Numbered"
	payloadSize = 200
	contentType = "application/json"
)

// keyFor returns the key of message seq when messages are spread over keys
// keys.
func keyFor(seq, keys int) string { return "key-" + strconv.Itoa(seq%keys) }

// payloadFor returns a payloadSize-byte JSON document for message seq.
func payloadFor(seq int) []byte {
	head := `{"seq":` + strconv.Itoa(seq) + `,"pad":"`
	tail := `"}`
	return []byte(head + strings.Repeat("x", max(0, payloadSize-len(head)-len(tail))) + tail)
}

// Header names used where the benchmark builds NATS messages itself (River's
// worker): the same number and kind of headers as Courier sets.
const (
	headerKey        = "Bench-Key"
	headerType       = "Bench-Type"
	headerVersion    = "Bench-Version"
	headerOccurredAt = "Bench-Occurred-At"
	headerCType      = "Content-Type"
)

// benchNATSMsg builds a JetStream message shaped like Courier's.
func benchNATSMsg(subject, id, key string, occurredAt time.Time, payload []byte) *natsgo.Msg {
	h := make(natsgo.Header, 6)
	h[jetstream.MsgIDHeader] = []string{id}
	h[headerKey] = []string{key}
	h[headerType] = []string{messageType}
	h[headerVersion] = []string{"1"}
	h[headerOccurredAt] = []string{occurredAt.UTC().Format(time.RFC3339Nano)}
	h[headerCType] = []string{contentType}
	return &natsgo.Msg{Subject: subject, Header: h, Data: payload}
}

// waitFor polls cond every interval until it returns true, ctx ends or
// timeout passes.
func waitFor(ctx context.Context, timeout, interval time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}
