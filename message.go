package courier

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

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

// Limits bounds what Validate accepts. The zero value means the defaults.
type Limits struct {
	// MaxPayloadBytes caps the payload size. Default 1 MiB, NATS's default
	// max_payload; raise it only together with the broker's limit.
	MaxPayloadBytes int
	// MaxHeaderBytes caps the total size of header names and values.
	// Default 64 KiB.
	MaxHeaderBytes int
}

// Default limits.
const (
	DefaultMaxPayloadBytes = 1 << 20
	DefaultMaxHeaderBytes  = 64 << 10
	maxNameBytes           = 255
	maxKeyBytes            = 1024
)

func (l Limits) withDefaults() Limits {
	if l.MaxPayloadBytes <= 0 {
		l.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	return l
}

// Validate checks that the message can be stored and published: id and
// occurred time set, topic, key and type non-empty valid UTF-8 without
// control characters (topic and type also without spaces), version at least 1,
// payload and headers within limits, header names that [CheckHeaderName]
// accepts, and header values free of line breaks. It returns a
// [*ValidationError] that names the field and the fix.
func (m *Message) Validate(limits Limits) error {
	limits = limits.withDefaults()
	if m.ID == uuid.Nil {
		return &ValidationError{Field: "ID", Problem: "is the nil UUID", Fix: "build messages with courier.NewMessage or courier.NewJSON, which set a UUIDv7"}
	}
	if err := checkName("Topic", m.Topic, maxNameBytes, false, `set a topic such as "orders"`); err != nil {
		return err
	}
	if err := checkName("Key", m.Key, maxKeyBytes, true, `set the ordering key, usually the aggregate id such as "order-42"`); err != nil {
		return err
	}
	if err := checkName("Type", m.Type, maxNameBytes, false, `set the message type such as "OrderPlaced"`); err != nil {
		return err
	}
	if m.Version < 1 {
		return &ValidationError{Field: "Version", Problem: fmt.Sprintf("is %d", m.Version), Fix: "use 1 or more (courier.WithVersion)"}
	}
	if err := checkName("ContentType", m.ContentType, maxNameBytes, true, `set a media type such as "application/json"`); err != nil {
		return err
	}
	if len(m.Payload) > limits.MaxPayloadBytes {
		return &ValidationError{Field: "Payload", Problem: fmt.Sprintf("is %d bytes, over the limit of %d", len(m.Payload), limits.MaxPayloadBytes),
			Fix: "store large data elsewhere and send a reference, or raise the limit together with the broker's"}
	}
	if m.OccurredAt.IsZero() {
		return &ValidationError{Field: "OccurredAt", Problem: "is not set", Fix: "set when the event happened (courier.WithOccurredAt)"}
	}
	size := 0
	for name, value := range m.Headers {
		size += len(name) + len(value)
		if err := CheckHeaderName(name); err != nil {
			return err
		}
		if !utf8.ValidString(value) || strings.ContainsAny(value, "\r\n\x00") {
			return &ValidationError{Field: fmt.Sprintf("Headers[%q]", name), Problem: "has a line break, NUL or invalid UTF-8 in its value",
				Fix: "encode the value (for example base64) or remove the offending characters"}
		}
	}
	if size > limits.MaxHeaderBytes {
		return &ValidationError{Field: "Headers", Problem: fmt.Sprintf("total %d bytes, over the limit of %d", size, limits.MaxHeaderBytes),
			Fix: "move bulky metadata into the payload"}
	}
	return nil
}

func checkName(field, s string, maxBytes int, spaces bool, fix string) error {
	switch {
	case s == "":
		return &ValidationError{Field: field, Problem: "is empty", Fix: fix}
	case len(s) > maxBytes:
		return &ValidationError{Field: field, Problem: fmt.Sprintf("is %d bytes, over the limit of %d", len(s), maxBytes), Fix: "shorten it"}
	case !utf8.ValidString(s):
		return &ValidationError{Field: field, Problem: "is not valid UTF-8", Fix: "use UTF-8 text"}
	}
	for _, r := range s {
		if unicode.IsControl(r) || (!spaces && unicode.IsSpace(r)) {
			what := "a control character"
			if unicode.IsSpace(r) {
				what = "white space"
			}
			return &ValidationError{Field: field, Problem: fmt.Sprintf("contains %s (%q)", what, r), Fix: "remove it"}
		}
	}
	return nil
}

// CheckHeaderName returns a [*ValidationError] when name cannot be a
// message header's name: it is not an HTTP token (RFC 9110), the form
// header names take on every broker; or a transport acts on it. Courier
// writes Courier-* headers itself (but Courier-Correlation-Id and
// Courier-Causation-Id, which are the message's), NATS acts on Nats-*
// (Nats-Rollup purges a stream), and HTTP clients, servers and proxies act
// on the names that carry credentials (Authorization, Cookie, Proxy-*), route
// (Host, Forwarded, X-Forwarded-*, X-Real-Ip, method overrides), frame or
// encode the body (Content-*, Transfer-Encoding, Connection, Upgrade and
// the other hop-by-hop names), or sign a webhook (Webhook-*), so a message
// header sent as an HTTP header by the webhook publisher must not be one of
// them. Names are compared without regard to case.
func CheckHeaderName(name string) error {
	field := fmt.Sprintf("Headers[%q]", name)
	if !isToken(name) {
		return &ValidationError{Field: field, Problem: "is not a valid header name",
			Fix: "use letters, digits and !#$%&'*+-.^_`|~ only, no spaces or colons"}
	}
	if name == HeaderCorrelationID || name == HeaderCausationID {
		return nil
	}
	lower := strings.ToLower(name)
	if strings.HasPrefix(lower, "courier-") || strings.HasPrefix(lower, "nats-") {
		return &ValidationError{Field: field, Problem: "uses a reserved prefix (Courier-, Nats-)",
			Fix: "choose another name; Courier sets these headers itself and brokers act on them"}
	}
	if httpReserved(lower) {
		return &ValidationError{Field: field, Problem: "is a name HTTP acts on (credentials, routing, framing or a webhook signature)",
			Fix: "choose another name; sent as a webhook's request header it would change how the request is authenticated, routed or read"}
	}
	return nil
}

// httpReserved reports whether lower, a header name in lower case, is one
// HTTP clients, servers or proxies act on.
func httpReserved(lower string) bool {
	for _, prefix := range []string{"proxy-", "x-forwarded-", "content-", "sec-", "webhook-", "if-"} {
		if strings.HasPrefix(lower, prefix) {
			return true
		}
	}
	switch lower {
	case "authorization", "www-authenticate", "cookie", "cookie2", "set-cookie", "set-cookie2",
		"host", "forwarded", "via", "max-forwards", "origin", "x-real-ip",
		"x-http-method", "x-http-method-override", "x-method-override", "x-original-url", "x-rewrite-url",
		"connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade", "expect", "range",
		"accept-encoding":
		return true
	}
	return false
}

// isToken reports whether s is an HTTP token (RFC 9110), the form header
// names must take on every broker Courier supports.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			continue
		}
		if !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}
