package courier

import (
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/google/uuid"
)

// Message is one event or command on its way from a producer's database to
// its consumers. Its ID is also the broker's deduplication id, so a message
// published twice (which at-least-once delivery allows) is recognisable.
type Message struct {
	// ID identifies the message everywhere: outbox row, broker dedup id
	// (Nats-Msg-Id), inbox marker. NewMessage sets a UUIDv7.
	ID uuid.UUID
	// Topic names the stream of messages it belongs to, for example
	// "orders". Brokers map it to a subject, topic or routing key.
	Topic string
	// Key is the ordering key, usually the aggregate id ("order-42").
	// Messages with the same key are published in the order they were
	// written when the transactions writing the key are serialised (lock
	// or version-check the aggregate); package relay's documentation
	// (Ordering) states the contract.
	Key string
	// Type names the payload's schema, for example "OrderPlaced".
	Type string
	// Version is the payload schema's version, starting at 1.
	Version int
	// ContentType is the payload's media type, for example
	// "application/json".
	ContentType string
	// Payload is the message body, any bytes.
	Payload []byte
	// Headers carry metadata: trace context, correlation and causation ids
	// and anything the application adds. Names are case-sensitive.
	Headers map[string]string
	// OccurredAt is when the event happened (UTC).
	OccurredAt time.Time
}

// Header names Courier understands. Trace context follows W3C Trace Context.
const (
	HeaderTraceParent   = "traceparent"
	HeaderTraceState    = "tracestate"
	HeaderCorrelationID = "Courier-Correlation-Id"
	HeaderCausationID   = "Courier-Causation-Id"
)

// Content types set by the constructors.
const (
	ContentTypeJSON   = "application/json"
	ContentTypeBinary = "application/octet-stream"
)

// Option sets an optional field of a message built by NewMessage or NewJSON.
type Option func(*Message)

// WithID sets the message id instead of a new UUIDv7. Use it when the id
// must be derived from the business operation (for example to make a
// repeated command recognisable).
func WithID(id uuid.UUID) Option { return func(m *Message) { m.ID = id } }

// WithVersion sets the payload schema version (default 1).
func WithVersion(v int) Option { return func(m *Message) { m.Version = v } }

// WithContentType sets the payload's media type.
func WithContentType(ct string) Option { return func(m *Message) { m.ContentType = ct } }

// WithOccurredAt sets when the event happened (default: now).
func WithOccurredAt(t time.Time) Option { return func(m *Message) { m.OccurredAt = t.UTC() } }

// WithType sets the message type, overriding the name NewJSON derives.
func WithType(typ string) Option { return func(m *Message) { m.Type = typ } }

// WithHeader sets one header.
func WithHeader(name, value string) Option {
	return func(m *Message) { m.SetHeader(name, value) }
}

// WithCorrelationID sets the correlation id, which ties together every
// message of one business conversation (an order's whole saga, say).
func WithCorrelationID(id string) Option { return WithHeader(HeaderCorrelationID, id) }

// CausedBy marks the message as a consequence of parent: the causation id
// becomes parent's id, and the correlation id and trace context are carried
// over (the correlation id defaults to parent's id when parent has none).
func CausedBy(parent Message) Option {
	return func(m *Message) {
		m.SetHeader(HeaderCausationID, parent.ID.String())
		corr := parent.Headers[HeaderCorrelationID]
		if corr == "" {
			corr = parent.ID.String()
		}
		m.SetHeader(HeaderCorrelationID, corr)
		for _, h := range []string{HeaderTraceParent, HeaderTraceState} {
			if v, ok := parent.Headers[h]; ok {
				m.SetHeader(h, v)
			}
		}
	}
}

// NewMessage builds a message with a new UUIDv7 id, version 1, the current
// time and content type application/octet-stream, then applies opts.
// It does not validate; the outbox writer does.
func NewMessage(topic, key, typ string, payload []byte, opts ...Option) Message {
	m := Message{
		ID:          uuid.Must(uuid.NewV7()),
		Topic:       topic,
		Key:         key,
		Type:        typ,
		Version:     1,
		ContentType: ContentTypeBinary,
		Payload:     payload,
		OccurredAt:  time.Now().UTC(),
	}
	for _, o := range opts {
		o(&m)
	}
	return m
}

// Typed is implemented by values that name their own message type. NewJSON
// uses MessageType when v implements it.
type Typed interface {
	MessageType() string
}

// Versioned is implemented by values that name the version of their
// message type's shape: the Go type a producer writes and a consumer
// decodes say which version they are, so the two deploy independently.
// NewJSON writes MessageVersion as the message's Version; inbox.On
// handles that version.
type Versioned interface {
	MessageVersion() int
}

// NewJSON builds a message whose payload is v encoded as JSON. The type is
// v's MessageType() when v implements [Typed], else its Go type name without
// the package (OrderPlaced for shop.OrderPlaced or *shop.OrderPlaced);
// WithType overrides both. The version is [VersionOf] v; WithVersion
// overrides it.
func NewJSON(topic, key string, v any, opts ...Option) (Message, error) {
	payload, err := json.Marshal(v)
	if err != nil {
		return Message{}, fmt.Errorf("courier: encode %T as JSON: %w", v, err)
	}
	m := NewMessage(topic, key, TypeName(v), payload, WithContentType(ContentTypeJSON), WithVersion(VersionOf(v)))
	for _, o := range opts {
		o(&m)
	}
	return m, nil
}

// TypeName returns the message type NewJSON gives v: v.MessageType() when v
// implements [Typed], else the name of v's Go type without its package.
func TypeName(v any) string {
	if t, ok := v.(Typed); ok {
		return t.MessageType()
	}
	rt := reflect.TypeOf(v)
	for rt != nil && rt.Kind() == reflect.Pointer {
		rt = rt.Elem()
	}
	if rt == nil {
		return ""
	}
	if rt.Name() != "" {
		return rt.Name()
	}
	return rt.String()
}

// VersionOf returns the message version NewJSON gives v: v.MessageVersion()
// when v implements [Versioned] (through a pointer too), else 1.
func VersionOf(v any) int {
	if vv, ok := v.(Versioned); ok {
		return vv.MessageVersion()
	}
	rv := reflect.ValueOf(v)
	if rv.IsValid() && rv.Kind() != reflect.Pointer {
		if vv, ok := reflect.New(rv.Type()).Interface().(Versioned); ok {
			return vv.MessageVersion()
		}
	}
	return 1
}

// DecodeJSON decodes the message's payload into v.
func (m Message) DecodeJSON(v any) error {
	if err := json.Unmarshal(m.Payload, v); err != nil {
		return fmt.Errorf("courier: decode %s %s payload as JSON: %w", m.Type, m.ID, err)
	}
	return nil
}

// SetHeader sets one header, allocating the map if needed.
func (m *Message) SetHeader(name, value string) {
	if m.Headers == nil {
		m.Headers = make(map[string]string, 4)
	}
	m.Headers[name] = value
}

// HeaderCarrier adapts a message's headers to OpenTelemetry's
// propagation.TextMapCarrier (Get, Set, Keys), so trace context can be
// injected into and extracted from messages without Courier importing
// OpenTelemetry:
//
//	otel.GetTextMapPropagator().Inject(ctx, courier.HeaderCarrier{Msg: &msg})
type HeaderCarrier struct{ Msg *Message }

// Get returns the value of a header, or "".
func (c HeaderCarrier) Get(key string) string { return c.Msg.Headers[key] }

// Set sets a header.
func (c HeaderCarrier) Set(key, value string) { c.Msg.SetHeader(key, value) }

// Keys lists the header names.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c.Msg.Headers))
	for k := range c.Msg.Headers {
		keys = append(keys, k)
	}
	return keys
}
