package cetest

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"strings"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/courier-go/courier"
)

// Message is a broker message in the binary content mode, as the SDK's
// protocol bindings see one: headers (the attributes carry the binding's
// prefix), the content type where the binding keeps it, and the data. It
// implements the SDK's binding.Message the way the SDK's own Kafka, NATS
// JetStream and AMQP bindings do, so binding.ToEvent decodes it as they
// would.
type Message struct {
	// Prefix is the binding's attribute prefix: "ce_" (Kafka), "ce-"
	// (NATS), "cloudEvents:" (AMQP).
	Prefix string
	// Headers are the message's headers (AMQP: application properties).
	Headers map[string]string
	// ContentType is the datacontenttype as the binding carries it (the
	// content-type header of Kafka and NATS, AMQP's content-type property).
	ContentType string
	// Data is the payload.
	Data []byte
}

var (
	_ binding.Message               = (*Message)(nil)
	_ binding.MessageMetadataReader = (*Message)(nil)
)

func (m *Message) version() spec.Version {
	specs := spec.WithPrefix(m.Prefix)
	return specs.Version(m.Headers[specs.PrefixedSpecVersionName()])
}

// ReadEncoding implements binding.MessageReader.
func (m *Message) ReadEncoding() binding.Encoding {
	if m.version() != nil {
		return binding.EncodingBinary
	}
	return binding.EncodingUnknown
}

// ReadStructured implements binding.MessageReader: never structured.
func (m *Message) ReadStructured(context.Context, binding.StructuredWriter) error {
	return binding.ErrNotStructured
}

// ReadBinary implements binding.MessageReader.
func (m *Message) ReadBinary(_ context.Context, w binding.BinaryWriter) error {
	v := m.version()
	if v == nil {
		return binding.ErrNotBinary
	}
	if m.ContentType != "" {
		if err := w.SetAttribute(v.AttributeFromKind(spec.DataContentType), m.ContentType); err != nil {
			return err
		}
	}
	for k, val := range m.Headers {
		if !strings.HasPrefix(k, m.Prefix) {
			continue
		}
		var err error
		if a := v.Attribute(k); a != nil {
			err = w.SetAttribute(a, val)
		} else {
			err = w.SetExtension(strings.ToLower(strings.TrimPrefix(k, m.Prefix)), val)
		}
		if err != nil {
			return fmt.Errorf("header %s: %w", k, err)
		}
	}
	if m.Data != nil {
		return w.SetData(bytes.NewReader(m.Data))
	}
	return nil
}

// GetAttribute implements binding.MessageMetadataReader.
func (m *Message) GetAttribute(k spec.Kind) (spec.Attribute, any) {
	v := m.version()
	if v == nil {
		return nil, nil
	}
	a := v.AttributeFromKind(k)
	if a == nil {
		return nil, nil
	}
	if k == spec.DataContentType {
		return a, m.ContentType
	}
	if val, ok := m.Headers[a.PrefixedName()]; ok {
		return a, val
	}
	return a, nil
}

// GetExtension implements binding.MessageMetadataReader.
func (m *Message) GetExtension(name string) any {
	if val, ok := m.Headers[m.Prefix+name]; ok {
		return val
	}
	return nil
}

// Finish implements binding.Message.
func (m *Message) Finish(error) error { return nil }

// Event decodes m with the SDK and validates the event.
func Event(m binding.Message) (*event.Event, error) {
	e, err := binding.ToEvent(context.Background(), m)
	if err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("validate: %w", err)
	}
	return e, nil
}

// Diff lists how e differs from the event Courier sends for m with the
// given source; empty when it does not.
func Diff(e *event.Event, m courier.Message, source string) []string {
	var d []string
	want := func(attr string, got, want any) {
		if got != want {
			d = append(d, fmt.Sprintf("%s: got %v, want %v", attr, got, want))
		}
	}
	want("specversion", e.SpecVersion(), "1.0")
	want("id", e.ID(), m.ID.String())
	want("source", e.Source(), source)
	want("type", e.Type(), m.Type)
	want("subject", e.Subject(), m.Key)
	want("datacontenttype", e.DataContentType(), m.ContentType)
	if !e.Time().Equal(m.OccurredAt) {
		d = append(d, fmt.Sprintf("time: got %v, want %v", e.Time(), m.OccurredAt))
	}
	want("courierversion", fmt.Sprint(e.Extensions()["courierversion"]), fmt.Sprint(m.Version))
	want("data", string(e.Data()), string(m.Payload))
	return d
}

// SameMessage returns "" when got, a message a Courier decoder read back,
// equals want field by field (times compared as instants), and what
// differs otherwise.
func SameMessage(got, want courier.Message) string {
	if got.ID != want.ID || got.Topic != want.Topic || got.Key != want.Key || got.Type != want.Type || got.Version != want.Version ||
		got.ContentType != want.ContentType || string(got.Payload) != string(want.Payload) || !got.OccurredAt.Equal(want.OccurredAt) ||
		!maps.Equal(got.Headers, want.Headers) {
		return fmt.Sprintf("decoded %+v, want %+v", got, want)
	}
	return ""
}
