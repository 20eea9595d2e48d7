// Package nats publishes Courier messages to NATS JetStream.
//
// A message becomes a JetStream message on subject SubjectPrefix+Topic with
// its payload as data and these headers:
//
//	Nats-Msg-Id          message id: JetStream drops a re-publication inside
//	                     the stream's duplicate window (2 minutes by default)
//	Courier-Key          ordering key
//	Courier-Type         message type
//	Courier-Version      schema version
//	Courier-Occurred-At  RFC 3339 time
//	Content-Type         payload media type
//
// plus the message's own headers (trace context, correlation id, …).
//
// # Durability
//
// A JetStream acknowledgement means the server has written the message to
// its store, not that the store reached the disk: by default nats-server
// flushes its file store lazily (sync_interval, two minutes), so a power loss
// or kernel crash can lose acknowledged messages (an independent 2025
// analysis of NATS 2.12 showed exactly that), and the outbox row is already
// marked published by then. Run the server with
//
//	jetstream { sync_interval: always }
//
// (server.Options.SyncAlways when embedded) to fsync every write before
// acknowledging it, at a cost in throughput, or run a three-node cluster with
// replicated streams so that an ack means a quorum holds the message. The
// embedded default (package embedded) syncs always.
package nats

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
)

// Header names Courier sets on every JetStream message.
const (
	HeaderKey         = "Courier-Key"
	HeaderType        = "Courier-Type"
	HeaderVersion     = "Courier-Version"
	HeaderOccurredAt  = "Courier-Occurred-At"
	HeaderContentType = "Content-Type"
)

// DefaultSubjectPrefix is prepended to topics unless Config says otherwise.
const DefaultSubjectPrefix = "courier."

// Config maps topics to subjects. The zero value uses DefaultSubjectPrefix.
type Config struct {
	// SubjectPrefix is prepended to a message's topic to form its subject:
	// topic "orders" becomes "courier.orders" by default. Set NoPrefix to use
	// topics as subjects unchanged.
	SubjectPrefix string
	// NoPrefix makes subjects equal to topics.
	NoPrefix bool
}

func (c Config) prefix() string {
	if c.NoPrefix {
		return ""
	}
	if c.SubjectPrefix == "" {
		return DefaultSubjectPrefix
	}
	return c.SubjectPrefix
}

// Subject returns the subject a topic is published on.
func (c Config) Subject(topic string) string { return c.prefix() + topic }

// Subjects returns the wildcard that covers every topic: "courier.>" by
// default, ">" without a prefix.
func (c Config) Subjects() string { return c.prefix() + ">" }

// Topic returns the topic a subject belongs to.
func (c Config) Topic(subject string) string { return strings.TrimPrefix(subject, c.prefix()) }

// ToNATS converts a message to a JetStream message.
func (c Config) ToNATS(m *courier.Message) *natsgo.Msg {
	h := make(natsgo.Header, len(m.Headers)+6)
	for k, v := range m.Headers {
		h[k] = []string{v}
	}
	h[jetstream.MsgIDHeader] = []string{m.ID.String()}
	h[HeaderKey] = []string{m.Key}
	h[HeaderType] = []string{m.Type}
	h[HeaderVersion] = []string{strconv.Itoa(m.Version)}
	h[HeaderOccurredAt] = []string{m.OccurredAt.UTC().Format(time.RFC3339Nano)}
	h[HeaderContentType] = []string{m.ContentType}
	return &natsgo.Msg{Subject: c.Subject(m.Topic), Header: h, Data: m.Payload}
}

// ErrMalformed is returned (wrapped) by FromNATS for a message that lacks
// Courier's headers or carries invalid ones. It is courier.ErrMalformed.
var ErrMalformed = courier.ErrMalformed

// FromNATS converts a JetStream message back to a Courier message. It fails
// with an error wrapping ErrMalformed when a required header is missing or
// invalid.
func (c Config) FromNATS(msg *natsgo.Msg) (courier.Message, error) {
	m := courier.Message{Topic: c.Topic(msg.Subject), Payload: msg.Data}
	bad := func(field string, err error) (courier.Message, error) {
		if err != nil {
			return courier.Message{}, fmt.Errorf("%w: header %s: %v", ErrMalformed, field, err)
		}
		return courier.Message{}, fmt.Errorf("%w: header %s is missing", ErrMalformed, field)
	}
	id := msg.Header.Get(jetstream.MsgIDHeader)
	if id == "" {
		return bad(jetstream.MsgIDHeader, nil)
	}
	var err error
	if m.ID, err = uuid.Parse(id); err != nil {
		return bad(jetstream.MsgIDHeader, err)
	}
	if m.Key = msg.Header.Get(HeaderKey); m.Key == "" {
		return bad(HeaderKey, nil)
	}
	if m.Type = msg.Header.Get(HeaderType); m.Type == "" {
		return bad(HeaderType, nil)
	}
	if m.Version, err = strconv.Atoi(msg.Header.Get(HeaderVersion)); err != nil {
		return bad(HeaderVersion, err)
	}
	if m.OccurredAt, err = time.Parse(time.RFC3339Nano, msg.Header.Get(HeaderOccurredAt)); err != nil {
		return bad(HeaderOccurredAt, err)
	}
	m.ContentType = msg.Header.Get(HeaderContentType)
	for k, vs := range msg.Header {
		switch k {
		case jetstream.MsgIDHeader, HeaderKey, HeaderType, HeaderVersion, HeaderOccurredAt, HeaderContentType:
			continue
		}
		if strings.HasPrefix(k, "Nats-") || len(vs) == 0 {
			continue
		}
		m.SetHeader(k, vs[0])
	}
	return m, nil
}

// Publisher publishes messages to JetStream with asynchronous publishes,
// waiting for every acknowledgement. It is safe for concurrent use.
type Publisher struct {
	js  jetstream.JetStream
	cfg Config
}

var _ broker.Publisher = (*Publisher)(nil)

// PublisherConfig tunes a Publisher.
type PublisherConfig struct {
	Config
	// AckTimeout bounds the wait for each acknowledgement. Default 5s.
	AckTimeout time.Duration
	// MaxPending caps unacknowledged publishes on the connection; Publish
	// waits for room beyond it. Default 16384.
	MaxPending int
}

// NewPublisher returns a Publisher on nc. For a relay, connect with
// [Connect] (or set nats.ReconnectBufSize(-1) yourself) so publishes fail
// fast while the connection is down instead of queueing behind it.
func NewPublisher(nc *natsgo.Conn, cfg PublisherConfig) (*Publisher, error) {
	if cfg.AckTimeout <= 0 {
		cfg.AckTimeout = 5 * time.Second
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = 16384
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(cfg.AckTimeout), jetstream.WithPublishAsyncMaxPending(cfg.MaxPending))
	if err != nil {
		return nil, fmt.Errorf("nats: jetstream: %w", err)
	}
	return &Publisher{js: js, cfg: cfg.Config}, nil
}

// Publish implements broker.Publisher.
func (p *Publisher) Publish(ctx context.Context, msgs []courier.Message) []error {
	errs := make([]error, len(msgs))
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i := range msgs {
		f, err := p.js.PublishMsgAsync(p.cfg.ToNATS(&msgs[i]), jetstream.WithRetryAttempts(0))
		if err != nil {
			errs[i] = classify(err)
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs[i] = classify(err)
		case <-ctx.Done():
			errs[i] = broker.Unavailable(fmt.Errorf("waiting for the ack: %w", ctx.Err()))
		}
	}
	return errs
}

// classify marks every error that is not about the message itself as
// broker.ErrUnavailable. Message errors: over the server's max_payload or the
// stream's max_msg_size, an invalid subject or headers, a bad request.
func classify(err error) error {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, natsgo.ErrMaxPayload), errors.Is(err, natsgo.ErrBadSubject),
		errors.Is(err, natsgo.ErrBadHeaderMsg), errors.Is(err, natsgo.ErrInvalidMsg):
		return err
	case errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum ||
		apiErr.ErrorCode == jetstream.JSErrCodeBadRequest):
		return err
	}
	return broker.Unavailable(err)
}
