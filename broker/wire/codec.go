package wire

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/cloudevents"
	"github.com/courier-go/courier/broker/internal/timestamp"
)

// Encode writes m's headers through set, each name once: Courier's fields
// (see the package documentation), then m's own headers but those named
// like one of Courier's or, with ce, like a CloudEvents attribute, then,
// with ce, m's CloudEvents attributes with the binding's prefix and the
// header that carries datacontenttype where the binding has one. The
// payload and the topic are the caller's to carry.
func (b Binding) Encode(m *courier.Message, ce *cloudevents.Config, set func(name, value string)) {
	set(b.IDHeader(), m.ID.String())
	set(HeaderKey, m.Key)
	set(b.TypeHeader(), m.Type)
	set(HeaderVersion, strconv.Itoa(m.Version))
	set(HeaderOccurredAt, timestamp.Format(m.OccurredAt))
	set(HeaderContentType, m.ContentType)
	prefix, _ := b.Prefixes()
	for k, v := range m.Headers {
		if b.courier(k) || ce != nil && b.attribute(prefix, k) {
			continue
		}
		set(k, v)
	}
	if ce == nil {
		return
	}
	for _, a := range ce.Attributes(prefix, m) {
		set(a.Name, a.Value)
	}
	if name := b.eventContentType(); name != "" {
		set(name, m.ContentType)
	}
}

// errHTTP is Decode's refusal of HTTP headers.
var errHTTP = errors.New("wire: a webhook request's headers are not signed, so no message is read from them: read the signed body (package webhook, Verifier.VerifyMessage)")

// Decode reads a message from headers h (a name's first value counts) and
// body, the payload. It sets every field but Topic, which the caller maps
// from the broker's address. A message that carries CloudEvents attributes
// and no Courier-Version is read from the attributes (see the package
// documentation). Errors wrap courier.ErrMalformed and name the header, or
// the CloudEvents attribute, that is missing or invalid; HTTP headers are
// refused (see the package documentation).
func (b Binding) Decode(h map[string][]string, body []byte) (courier.Message, error) {
	if b == HTTP {
		return courier.Message{}, errHTTP
	}
	get := func(name string) string {
		if vs := h[name]; len(vs) > 0 {
			return vs[0]
		}
		return ""
	}
	ce := b.eventPrefix(get)
	var m courier.Message
	var err error
	if ce != "" && get(HeaderVersion) == "" {
		m, err = b.decodeEvent(ce, get)
	} else {
		m, err = b.decodeFields(get)
	}
	if err != nil {
		return courier.Message{}, err
	}
	m.Payload = body
	for k, vs := range h {
		if len(vs) == 0 || b.courier(k) || b.foreign(k) || ce != "" && b.attribute(ce, k) {
			continue
		}
		m.SetHeader(k, vs[0])
	}
	return m, nil
}

// eventPrefix returns the prefix of the CloudEvents attributes the headers
// get reads carry (their specversion), "" when they carry none.
func (b Binding) eventPrefix(get func(string) string) string {
	write, alsoRead := b.Prefixes()
	for _, p := range []string{write, alsoRead} {
		if p != "" && cloudevents.IsEvent(p, get) {
			return p
		}
	}
	return ""
}

// decodeFields reads Courier's fields from the headers get reads.
func (b Binding) decodeFields(get func(string) string) (courier.Message, error) {
	bad := func(name string, err error) (courier.Message, error) {
		if err != nil {
			return courier.Message{}, fmt.Errorf("%w: %s: %v", courier.ErrMalformed, b.field(name), err)
		}
		return courier.Message{}, fmt.Errorf("%w: %s is missing", courier.ErrMalformed, b.field(name))
	}
	var m courier.Message
	var err error
	id := get(b.IDHeader())
	if id == "" {
		return bad(b.IDHeader(), nil)
	}
	if m.ID, err = uuid.Parse(id); err != nil {
		return bad(b.IDHeader(), err)
	}
	if m.Key = get(HeaderKey); m.Key == "" {
		return bad(HeaderKey, nil)
	}
	if m.Type = get(b.TypeHeader()); m.Type == "" {
		return bad(b.TypeHeader(), nil)
	}
	if m.Version, err = strconv.Atoi(get(HeaderVersion)); err != nil {
		return bad(HeaderVersion, err)
	}
	if m.OccurredAt, err = timestamp.Parse(get(HeaderOccurredAt)); err != nil {
		return bad(HeaderOccurredAt, err)
	}
	m.ContentType = get(HeaderContentType)
	return m, nil
}

// decodeEvent reads a message from the CloudEvents attributes with prefix
// ce that the headers get reads carry. Courier-Key stands in for a missing
// subject, and the content type is the binding's datacontenttype header,
// else Content-Type, else the datacontenttype attribute.
func (b Binding) decodeEvent(ce string, get func(string) string) (courier.Message, error) {
	m, err := cloudevents.Decode(ce, func(name string) string {
		if v := get(name); v != "" || name != ce+cloudevents.AttrSubject {
			return v
		}
		return get(HeaderKey)
	})
	if err != nil {
		return courier.Message{}, err
	}
	for _, name := range []string{b.eventContentType(), HeaderContentType, ce + cloudevents.AttrDataContentType} {
		if v := get(name); name != "" && v != "" {
			m.ContentType = v
			break
		}
	}
	return m, nil
}

// TypeOf returns the message type that h, a delivery's headers as
// broker.Raw carries them, names, whichever broker carried it: the first
// value of the first header TypeHeaders names that has a value other than
// ""; "" when none does. It reads, for display, a delivery that may not
// decode (a parked one) and checks nothing. A webhook delivery's type is
// in its signed body, not in h.
func TypeOf(h map[string][]string) string {
	for _, name := range TypeHeaders() {
		if vs := h[name]; len(vs) > 0 && vs[0] != "" {
			return vs[0]
		}
	}
	return ""
}

// TypeHeaders returns the names of the headers that carry a delivery's
// message type, whichever broker carried it, in the order TypeOf reads
// them: Courier-Type, AMQP's type property, then the CloudEvents type
// attribute of each binding. The stores read the type of a parked
// delivery from its stored headers by these names, without the rest of
// the headers.
func TypeHeaders() []string {
	names := []string{HeaderType, PropertyType}
	for _, b := range []Binding{NATS, Kafka, AMQP} {
		write, alsoRead := b.Prefixes()
		for _, prefix := range []string{write, alsoRead} {
			if name := prefix + cloudevents.AttrType; !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	return names
}
