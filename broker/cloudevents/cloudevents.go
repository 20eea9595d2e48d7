package cloudevents

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/internal/timestamp"
)

// SpecVersion is the CloudEvents version Courier writes.
const SpecVersion = "1.0"

// Attribute names, without a binding's prefix.
const (
	AttrSpecVersion     = "specversion"
	AttrID              = "id"
	AttrSource          = "source"
	AttrType            = "type"
	AttrSubject         = "subject"
	AttrTime            = "time"
	AttrDataContentType = "datacontenttype"
	AttrDataSchema      = "dataschema"
	// AttrVersion is Courier's extension attribute for the schema version
	// (Message.Version). CloudEvents extension names are lower-case letters
	// and digits.
	AttrVersion = "courierversion"
)

// Prefixes of the attribute headers in each binding's binary content mode.
const (
	// PrefixHTTP is the HTTP binding's header prefix (ce-id, …).
	PrefixHTTP = "ce-"
	// PrefixNATS is the NATS binding's header prefix, the one the
	// CloudEvents Go SDK's JetStream binding reads.
	PrefixNATS = "ce-"
	// PrefixKafka is the Kafka binding's header prefix (ce_id, …).
	PrefixKafka = "ce_"
	// PrefixAMQP is the AMQP binding's application-property prefix. The
	// binding allows "cloudEvents:" and "cloudEvents_"; Courier writes the
	// one the CloudEvents Go SDK reads, and reads both (see
	// PrefixAMQPUnderscore).
	PrefixAMQP = "cloudEvents:"
	// PrefixAMQPUnderscore is the AMQP binding's other prefix, written by
	// JMS and Spring clients. Courier's AMQP decoder accepts it.
	PrefixAMQPUnderscore = "cloudEvents_"
)

// ContentTypeHeader is the header that carries datacontenttype in the
// Kafka and NATS bindings. Kafka and NATS header names are case-sensitive,
// so a publisher with CloudEvents on writes it next to Courier's
// Content-Type.
const ContentTypeHeader = "content-type"

// Config turns on the CloudEvents binary content mode of a publisher.
type Config struct {
	// Source is the CloudEvents source attribute: a URI reference naming
	// the producer, such as "/shop/orders" or "https://shop.example.com".
	// Required. Together with the message id it identifies an event.
	Source string
}

// Check returns an error naming field (for example
// "nats: PublisherConfig.CloudEvents") when c is unusable: Source empty or
// not a URI reference.
func (c *Config) Check(field string) error {
	if c.Source == "" {
		return fmt.Errorf("%s.Source is empty: set the CloudEvents source, a URI reference naming the producer such as \"/shop/orders\" or \"https://shop.example.com\"", field)
	}
	if strings.ContainsFunc(c.Source, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return fmt.Errorf("%s.Source %q contains white space or a control character: percent-encode them, every binding carries the source as a header", field, c.Source)
	}
	if _, err := url.Parse(c.Source); err != nil {
		return fmt.Errorf("%s.Source %q is not a URI reference (%v): use a path such as \"/shop/orders\" or an absolute URI", field, c.Source, err)
	}
	return nil
}

// Clone returns a copy of c, nil for nil, so that a publisher keeps its
// configuration whatever the caller does with c afterwards.
func (c *Config) Clone() *Config {
	if c == nil {
		return nil
	}
	cp := *c
	return &cp
}

// Attribute is one CloudEvents attribute with its binding's prefix.
type Attribute struct {
	Name, Value string
}

// Attributes returns m's CloudEvents attributes (see the package
// documentation), each name with prefix. datacontenttype is not among them:
// each binding carries it in its own content type.
func (c *Config) Attributes(prefix string, m *courier.Message) []Attribute {
	return []Attribute{
		{prefix + AttrSpecVersion, SpecVersion},
		{prefix + AttrID, m.ID.String()},
		{prefix + AttrSource, c.Source},
		{prefix + AttrType, m.Type},
		{prefix + AttrSubject, m.Key},
		{prefix + AttrTime, timestamp.Format(m.OccurredAt)},
		{prefix + AttrVersion, strconv.Itoa(m.Version)},
	}
}

// IsEvent reports whether a message whose headers get reads carries
// CloudEvents attributes with prefix (its specversion).
func IsEvent(prefix string, get func(name string) string) bool {
	return get(prefix+AttrSpecVersion) != ""
}

// Written reports whether name is one of the attributes Courier writes
// (Attributes) or datacontenttype, prefix included, compared without
// regard to case. Decoders leave them out of a decoded message's headers.
func Written(prefix, name string) bool {
	if len(name) <= len(prefix) || !strings.EqualFold(name[:len(prefix)], prefix) {
		return false
	}
	switch strings.ToLower(name[len(prefix):]) {
	case AttrSpecVersion, AttrID, AttrSource, AttrType, AttrSubject, AttrTime, AttrDataContentType, AttrVersion:
		return true
	}
	return false
}

// sourceIDs is the namespace of the UUIDs Decode derives from events whose
// id is not a UUID.
var sourceIDs = uuid.MustParse("6f0e6c5e-4b0b-4c55-9a43-7c1f2b1a9d2e")

// Decode reads a message from CloudEvents attributes alone, for a message
// that lacks Courier's headers: get returns the value of a header, and the
// attribute names are prefix followed by the attribute name. It sets ID,
// Key, Type, Version and OccurredAt; the caller sets Topic, ContentType,
// Payload and Headers from the broker message.
//
//   - ID is the id when it is a UUID; otherwise a UUID derived from source
//     and id (SHA-1, version 5), so that the same event gets the same id
//     again (CloudEvents makes source and id unique together).
//   - Key is the subject, Type the type, OccurredAt the time.
//   - Version is courierversion, 1 when absent.
//
// It fails with an error wrapping courier.ErrMalformed, naming the
// attribute, when id, type, subject or time is missing or invalid, or the
// specversion is not 1.0.
func Decode(prefix string, get func(name string) string) (courier.Message, error) {
	bad := func(attr, problem string) (courier.Message, error) {
		return courier.Message{}, fmt.Errorf("%w: CloudEvents attribute %s%s %s", courier.ErrMalformed, prefix, attr, problem)
	}
	if v := get(prefix + AttrSpecVersion); v != SpecVersion {
		return bad(AttrSpecVersion, fmt.Sprintf("is %q, not %q", v, SpecVersion))
	}
	var m courier.Message
	id := get(prefix + AttrID)
	if id == "" {
		return bad(AttrID, "is missing")
	}
	if u, err := uuid.Parse(id); err == nil {
		m.ID = u
	} else {
		m.ID = uuid.NewSHA1(sourceIDs, []byte(get(prefix+AttrSource)+"\x00"+id))
	}
	if m.Type = get(prefix + AttrType); m.Type == "" {
		return bad(AttrType, "is missing")
	}
	if m.Key = get(prefix + AttrSubject); m.Key == "" {
		return bad(AttrSubject, "is missing: Courier needs it as the ordering key")
	}
	t := get(prefix + AttrTime)
	if t == "" {
		return bad(AttrTime, "is missing")
	}
	var err error
	if m.OccurredAt, err = timestamp.Parse(t); err != nil {
		return bad(AttrTime, "is not an RFC 3339 time: "+err.Error())
	}
	m.Version = 1
	if v := get(prefix + AttrVersion); v != "" {
		if m.Version, err = strconv.Atoi(v); err != nil || m.Version < 1 {
			return bad(AttrVersion, fmt.Sprintf("is %q, not a version of 1 or more", v))
		}
	}
	return m, nil
}
