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
// # CloudEvents
//
// With PublisherConfig.CloudEvents set, a message also carries the
// CloudEvents attributes of the NATS binding's binary content mode (ce-id,
// ce-source, ce-type, ce-subject, … and content-type; see package
// broker/cloudevents), next to Courier's headers, which stay. FromNATS
// leaves those attributes out of a decoded message's headers, and decodes a
// message that carries CloudEvents attributes instead of Courier's headers
// (see cloudevents.Decode).
//
// # Errors
//
// Publish tells failures of the message from failures of the broker (see
// broker.Publisher). A message published on a subject no stream binds fails
// with an error wrapping ErrNoStream that names the subject: JetStream is up
// and will refuse it until a stream binds the subject, so it counts against
// the message, and the relay makes it a dead letter after MaxAttempts while
// other messages keep flowing. NATS answers such a publish with "no
// responders" (or not at all, when a plain subscriber listens on the
// subject), which it also does while JetStream is not ready: a server still
// starting, a clustered stream without a leader. Publish therefore asks
// JetStream which stream binds the subject before it blames the message, and
// reports broker.ErrUnavailable unless JetStream answers that none does. It
// asks before the first publish on each subject, too, so that such a message
// fails at once rather than after AckTimeout.
//
// Refusals that no retry can change wrap broker.ErrRejected, so the relay
// makes the message a dead letter at once with the broker's reason: a
// message larger than the server's max_payload (checked by the client
// before sending) or than the max_msg_size of the stream that binds its
// subject, headers over JetStream's 64 KiB, an invalid subject. A subject
// no stream binds is deliberately not among them: binding it is a change of
// configuration the message may live to see.
//
// # Atomic batches: a key's run pipelined
//
// On nats-server 2.12 and later JetStream takes atomic batches (ADR-50): up
// to 1,000 messages (the server's batch limit, max_msgs) sent with the headers
// Nats-Batch-Id, Nats-Batch-Sequence and, on the last, Nats-Batch-Commit,
// stored together and in order, or none of them, into a stream that allows
// atomic publish (allow_atomic). EnsureStream creates streams that allow it
// on such servers (StreamConfig.NoAtomicBatches turns that off); an existing
// stream keeps its settings (nats stream edit NAME --allow-batch).
//
// The Publisher implements broker.OrderKeeper with them. KeepsKeyOrder
// reports true when the connected server's version (from its INFO) is 2.12
// or later and every stream that captures the publisher's subjects allows
// atomic publish (looked up at most every 30 seconds); the relay then hands
// Publish each key's run of messages at once. Publish sends a key's run as
// atomic batches, each waiting for the acknowledgement of the one before, up
// to PublisherConfig.MaxBatches keys' batches at once, and a key's single
// message as it always did. A batch is stored whole or not at all; when one
// fails, the key's later messages in the call are not sent: they fail with
// broker.ErrUnavailable ("held back"). The promise holds even where batches
// are not to be had after all (a stream whose allow_atomic was turned off, a
// reconnect to an older server): the run then goes one message after the
// other, each waiting for the acknowledgement of the one before.
//
// Within a batch:
//
//   - A message the server would refuse for good (over max_payload or the
//     stream's max_msg_size with the batch headers, headers over 64 KiB) is
//     left out of the batch and published alone, between the batches before
//     and after it, so that it alone is rejected (broker.ErrRejected) and
//     the rest of its key's run is stored in order. A batch refused without
//     saying which message is at fault (a message gone missing, a bad
//     request) is published again one message at a time.
//   - Nats-Msg-Id still deduplicates, but JetStream refuses a whole batch
//     that holds a message id it has stored within the duplicate window (and
//     nats-server 2.12.0 refuses Nats-Msg-Id in batches altogether). A run
//     published again after part of it was stored (a relay that crashed
//     before it recorded the outcome) is therefore refused as a batch; the
//     Publisher then publishes it one message at a time, each duplicate
//     acknowledged and dropped as usual, until a message is stored afresh,
//     and goes on in batches from there. On a server that refuses the header
//     in batches it stops using batches (KeepsKeyOrder turns false).
//   - A server configured with a smaller batch limit (jetstream { limits {
//     batch { max_msgs } } }) refuses the batch, saying its limit; the
//     Publisher's batches take that size from then on. Too many batches open
//     on the stream (the limit max_inflight_per_stream, 50 by default) makes a
//     batch wait and try again, a few times, before it fails as
//     broker.ErrUnavailable.
//
// With PublisherConfig.NoAtomicBatches, on servers older than 2.12 (Debian's
// 2.9, say) and with streams that do not allow atomic
// publish, KeepsKeyOrder is false and Publish sends every message of a call
// at once, as before: the relay then publishes a key's messages one round
// trip apart.
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
	"sync"
	"time"

	"github.com/google/uuid"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/cloudevents"
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
// invalid. A message without Courier-Type that carries CloudEvents
// attributes (ce-specversion) is decoded from them (see
// cloudevents.Decode).
func (c Config) FromNATS(msg *natsgo.Msg) (courier.Message, error) {
	if msg.Header.Get(HeaderType) == "" && cloudevents.IsEvent(cloudevents.PrefixNATS, msg.Header.Get) {
		return c.fromEvent(msg)
	}
	m := courier.Message{Topic: c.Topic(msg.Subject), Payload: msg.Data}
	ce := cloudevents.IsEvent(cloudevents.PrefixNATS, msg.Header.Get)
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
		if ce && (k == cloudevents.ContentTypeHeader || cloudevents.Written(cloudevents.PrefixNATS, k)) {
			continue
		}
		m.SetHeader(k, vs[0])
	}
	return m, nil
}

// fromEvent decodes a message that carries CloudEvents attributes instead
// of Courier's headers.
func (c Config) fromEvent(msg *natsgo.Msg) (courier.Message, error) {
	m, err := cloudevents.Decode(cloudevents.PrefixNATS, msg.Header.Get)
	if err != nil {
		return courier.Message{}, err
	}
	m.Topic, m.Payload = c.Topic(msg.Subject), msg.Data
	if m.ContentType = msg.Header.Get(cloudevents.ContentTypeHeader); m.ContentType == "" {
		m.ContentType = msg.Header.Get(HeaderContentType)
	}
	for k, vs := range msg.Header {
		switch k {
		case HeaderKey, HeaderVersion, HeaderOccurredAt, HeaderContentType, cloudevents.ContentTypeHeader:
			continue
		}
		if strings.HasPrefix(k, "Nats-") || len(vs) == 0 || cloudevents.Written(cloudevents.PrefixNATS, k) {
			continue
		}
		m.SetHeader(k, vs[0])
	}
	return m, nil
}

// toNATS converts a message to a JetStream message, with its CloudEvents
// attributes when the Publisher has them on.
func (p *Publisher) toNATS(m *courier.Message) *natsgo.Msg {
	nm := p.cfg.ToNATS(m)
	if p.ce != nil {
		for _, a := range p.ce.Attributes(cloudevents.PrefixNATS, m) {
			nm.Header[a.Name] = []string{a.Value}
		}
		nm.Header[cloudevents.ContentTypeHeader] = []string{m.ContentType}
	}
	return nm
}

// ErrNoStream is wrapped by the error Publish returns for a message whose
// subject no JetStream stream binds: JetStream answered that no stream's
// subjects match it. The broker is up; the message cannot be stored until an
// operator binds a stream to the subject or the topic is corrected, so the
// failure counts against the message's attempts (it is not
// broker.ErrUnavailable) and the message becomes a dead letter in the end
// instead of holding its key back for ever.
var ErrNoStream = errors.New("nats: no stream binds the subject")

// Publisher publishes messages to JetStream with asynchronous publishes,
// waiting for every acknowledgement. It is safe for concurrent use.
type Publisher struct {
	js     jetstream.JetStream
	cfg    Config
	ce     *cloudevents.Config // nil: CloudEvents off
	lookup time.Duration       // bound on one stream lookup

	mu    sync.Mutex
	bound map[string]struct{} // subjects a stream acknowledged

	batching // atomic batches: see batch.go
}

var (
	_ broker.Publisher   = (*Publisher)(nil)
	_ broker.OrderKeeper = (*Publisher)(nil)
)

// maxBound caps the subjects a Publisher remembers as bound; beyond it the
// memory starts afresh (it costs one lookup per subject to rebuild).
const maxBound = 10000

// PublisherConfig tunes a Publisher.
type PublisherConfig struct {
	Config
	// AckTimeout bounds the wait for each acknowledgement. Default 5s. A
	// lookup of the stream that binds a subject (see Publisher.Publish) is
	// bounded by the smaller of AckTimeout and 1s.
	AckTimeout time.Duration
	// MaxPending caps unacknowledged publishes on the connection; Publish
	// waits for room beyond it. Default 16384.
	MaxPending int
	// CloudEvents, if set, adds the CloudEvents attributes of the binary
	// content mode to every message, next to Courier's headers (see the
	// package documentation). Its Source is required. Default nil: off.
	CloudEvents *cloudevents.Config
	// MaxBatches caps the atomic batches the Publisher has open at once,
	// over all its Publish calls, each the run of one key (see
	// Publisher.KeepsKeyOrder). Default 16: a server takes at most 50 open
	// atomic batches per stream and 1,000 in all unless configured
	// otherwise, and the relays of a stream share them (three relays take
	// 48).
	MaxBatches int
	// NoAtomicBatches turns atomic batches off: KeepsKeyOrder reports
	// false, and the relay publishes a key's messages one round trip
	// apart, as it does on servers older than 2.12.
	NoAtomicBatches bool
}

// NewPublisher returns a Publisher on nc. For a relay, connect with
// [Connect] (or set nats.ReconnectBufSize(-1) yourself) so publishes fail
// fast while the connection is down instead of queueing behind it.
func NewPublisher(nc *natsgo.Conn, cfg PublisherConfig) (*Publisher, error) {
	if cfg.CloudEvents != nil {
		if err := cfg.CloudEvents.Check("nats: PublisherConfig.CloudEvents"); err != nil {
			return nil, err
		}
	}
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
	if cfg.MaxBatches <= 0 {
		cfg.MaxBatches = 16
	}
	p := &Publisher{js: js, cfg: cfg.Config, ce: cfg.CloudEvents.Clone(), lookup: min(cfg.AckTimeout, time.Second), bound: make(map[string]struct{})}
	p.batching.init(cfg.MaxBatches, cfg.NoAtomicBatches)
	return p, nil
}

// Publish implements broker.Publisher. Once KeepsKeyOrder has reported
// true, it publishes each topic and key's run of several messages in the
// call as atomic batches, keeping the key's order (see the package
// documentation); every other message is published at once, as below.
//
// A subject no stream binds gets no acknowledgement: NATS answers "no
// responders" at once, or, when a plain subscriber listens on the subject,
// the publish times out after AckTimeout. JetStream that is not ready (a
// server still starting, a clustered stream without a leader, JetStream off)
// looks the same. Publish tells them apart by asking JetStream which stream
// binds the subject, at most once per subject and call:
//
//   - Before the first publish on a subject (and again after a publish on it
//     went unanswered), so that a message no stream would take fails at once
//     instead of holding up the acknowledgements of the others. A subject a
//     stream has acknowledged is not asked about again.
//   - After a publish went unanswered.
//
// When JetStream answers that no stream binds the subject, the message fails
// with an error wrapping ErrNoStream that names the subject and the fix; it
// counts against the message. When JetStream names a stream, or does not
// answer, the error wraps broker.ErrUnavailable (after one unanswered lookup
// the call asks no more). Each lookup takes at most min(AckTimeout, 1s).
//
// Other errors: a message over the server's max_payload or the stream's
// max_msg_size, headers over JetStream's 64 KiB, an invalid subject or
// headers the client cannot encode are refused for good: the error wraps
// broker.ErrRejected, names the subject, the size and the limit where they
// apply, and says what to change. A request the server calls bad counts
// against the message without being permanent. Everything else (connection
// lost or closed, timeouts, a full stream, ctx ending) wraps
// broker.ErrUnavailable.
func (p *Publisher) Publish(ctx context.Context, msgs []courier.Message) []error {
	errs := make([]error, len(msgs))
	lk := &lookups{p: p}
	if !p.pipelines() {
		all := make([]int, len(msgs))
		for i := range all {
			all[i] = i
		}
		p.publishEach(ctx, lk, msgs, all, errs)
		return errs
	}
	p.publishRuns(ctx, lk, msgs, errs)
	return errs
}

// publishEach publishes the messages msgs[idx] asynchronously, in idx
// order, and waits for their acknowledgements, setting errs[i] for each.
func (p *Publisher) publishEach(ctx context.Context, lk *lookups, msgs []courier.Message, idx []int, errs []error) {
	futures := make([]jetstream.PubAckFuture, len(idx))
	for n, i := range idx {
		if subject := p.cfg.Subject(msgs[i].Topic); !p.isBound(subject) {
			if err := lk.preflight(ctx, msgs[i].Topic); err != nil {
				errs[i] = err
				continue
			}
		}
		f, err := p.js.PublishMsgAsync(p.toNATS(&msgs[i]), jetstream.WithRetryAttempts(0))
		if err != nil {
			errs[i] = p.classify(&msgs[i], err)
			continue
		}
		futures[n] = f
	}
	for n, f := range futures {
		if f == nil {
			continue
		}
		_, errs[idx[n]] = p.await(ctx, lk, &msgs[idx[n]], f)
	}
}

// await waits for f, the acknowledgement of a publish of m, and returns
// it, or the failure, classified.
func (p *Publisher) await(ctx context.Context, lk *lookups, m *courier.Message, f jetstream.PubAckFuture) (*jetstream.PubAck, error) {
	select {
	case ack := <-f.Ok():
		p.setBound(p.cfg.Subject(m.Topic), true)
		return ack, nil
	case err := <-f.Err():
		if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, jetstream.ErrAsyncPublishTimeout) {
			p.setBound(p.cfg.Subject(m.Topic), false)
			return nil, lk.verdict(ctx, m.Topic, err)
		}
		return nil, p.classify(m, err)
	case <-ctx.Done():
		return nil, broker.Unavailable(fmt.Errorf("waiting for the ack: %w", ctx.Err()))
	}
}

func (p *Publisher) isBound(subject string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.bound[subject]
	return ok
}

func (p *Publisher) setBound(subject string, bound bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !bound {
		delete(p.bound, subject)
		return
	}
	if len(p.bound) >= maxBound {
		clear(p.bound)
	}
	p.bound[subject] = struct{}{}
}

// lookups asks JetStream, for one Publish call, which stream binds a
// subject, at most once per subject, and gives up asking after the first
// lookup that went unanswered.
type lookups struct {
	p       *Publisher
	mu      sync.Mutex // several keys' runs ask at once
	answers map[string]lookup
	silent  error // the first unanswered lookup's error
}

// lookup is JetStream's answer about one subject.
type lookup struct {
	stream string // the stream that binds it, if any
	err    error  // nil, jetstream.ErrStreamNotFound, jetstream.ErrInvalidSubject, or no answer
}

func (l *lookups) ask(ctx context.Context, subject string) lookup {
	l.mu.Lock()
	defer l.mu.Unlock()
	if a, ok := l.answers[subject]; ok {
		return a
	}
	if l.silent != nil {
		return lookup{err: l.silent}
	}
	// Bounded on its own: a publish that timed out may have used up ctx,
	// and the answer decides whether the failure counts.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.p.lookup)
	stream, err := l.p.js.StreamNameBySubject(lctx, subject)
	cancel()
	a := lookup{stream: stream, err: err}
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) && !errors.Is(err, jetstream.ErrInvalidSubject) {
		l.silent = err
	}
	if l.answers == nil {
		l.answers = make(map[string]lookup)
	}
	l.answers[subject] = a
	return a
}

// preflight returns an ErrNoStream error when JetStream says no stream
// binds topic's subject, a rejection when the subject is invalid, nil
// otherwise (the publish then goes ahead).
func (l *lookups) preflight(ctx context.Context, topic string) error {
	if ctx.Err() != nil {
		return nil
	}
	subject := l.p.cfg.Subject(topic)
	switch a := l.ask(ctx, subject); {
	case errors.Is(a.err, jetstream.ErrStreamNotFound):
		return noStream(subject, topic)
	case errors.Is(a.err, jetstream.ErrInvalidSubject):
		return badSubject(subject, topic, a.err)
	}
	return nil
}

// verdict classifies pubErr, a publish no stream answered.
func (l *lookups) verdict(ctx context.Context, topic string, pubErr error) error {
	subject := l.p.cfg.Subject(topic)
	a := l.ask(ctx, subject)
	switch {
	case a.err == nil:
		return broker.Unavailable(fmt.Errorf("subject %q: stream %s binds it but did not acknowledge: %w (stream not ready, without a leader, or overloaded)",
			subject, a.stream, pubErr))
	case errors.Is(a.err, jetstream.ErrStreamNotFound):
		return noStream(subject, topic)
	case errors.Is(a.err, jetstream.ErrInvalidSubject):
		return badSubject(subject, topic, a.err)
	default:
		return broker.Unavailable(fmt.Errorf("subject %q: %w; JetStream did not say which stream binds it either (%w): is JetStream enabled and ready?",
			subject, pubErr, a.err))
	}
}

func noStream(subject, topic string) error {
	return fmt.Errorf("%w %q (topic %q): bind a stream to it (add the subject to a stream's subjects, see EnsureStream) or check the message's topic",
		ErrNoStream, subject, topic)
}

func badSubject(subject, topic string, err error) error {
	return broker.Rejected(fmt.Errorf("subject %q (topic %q) is not a valid NATS subject (%w): use a topic of dot-separated tokens without white space or wildcards, and check the subject prefix",
		subject, topic, err))
}

// classify sorts the error of a publish of m the broker answered, or the
// client refused to send:
//
//   - The broker's permanent refusals of the message itself wrap
//     broker.ErrRejected and say what to change: a message over the server's
//     max_payload or the stream's max_msg_size, headers over JetStream's
//     64 KiB, an invalid subject, headers the client cannot encode.
//   - A bad request counts against the message without being permanent.
//   - Everything else (connection lost or closed, timeouts, a stream full or
//     not ready) wraps broker.ErrUnavailable.
func (p *Publisher) classify(m *courier.Message, err error) error {
	subject := p.cfg.Subject(m.Topic)
	var apiErr *jetstream.APIError
	isAPI := errors.As(err, &apiErr)
	switch {
	case errors.Is(err, natsgo.ErrMaxPayload):
		return broker.Rejected(fmt.Errorf("subject %q: %w: the message's payload is %d bytes and the server's max_payload is %d bytes, headers included: shrink the payload (store large data elsewhere and send a reference) or raise max_payload on every server, then replay the dead letter",
			subject, err, len(m.Payload), p.js.Conn().MaxPayload()))
	case isAPI && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum:
		return broker.Rejected(fmt.Errorf("subject %q: %w: the message's payload is %d bytes, over the max_msg_size of the stream that binds the subject: shrink the payload or raise the stream's max_msg_size, then replay the dead letter",
			subject, err, len(m.Payload)))
	case isAPI && apiErr.ErrorCode == errCodeHeaderExceedsMaximum:
		return broker.Rejected(fmt.Errorf("subject %q: %w: the message's headers are over JetStream's limit of 64 KiB: send fewer or shorter headers",
			subject, err))
	case errors.Is(err, natsgo.ErrBadSubject):
		return badSubject(subject, m.Topic, err)
	case errors.Is(err, natsgo.ErrBadHeaderMsg), errors.Is(err, natsgo.ErrInvalidMsg):
		return broker.Rejected(fmt.Errorf("subject %q: %w: the client cannot send the message's headers: check the header names and values", subject, err))
	case isAPI && apiErr.ErrorCode == jetstream.JSErrCodeBadRequest:
		return fmt.Errorf("subject %q: %w", subject, err)
	}
	return broker.Unavailable(err)
}

// errCodeHeaderExceedsMaximum is JetStream's error code for a message whose
// headers exceed 64 KiB (JSStreamHeaderExceedsMaximumErr); nats.go names no
// constant for it.
const errCodeHeaderExceedsMaximum jetstream.ErrorCode = 10097
