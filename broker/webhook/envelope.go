package webhook

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/cloudevents"
	"github.com/courier-go/courier/broker/internal/timestamp"
)

// BodyMode is how a request carries a message: what the signature covers.
type BodyMode int

const (
	// BodyEnvelope, the default, sends the message as a JSON envelope, the
	// payload shape the Standard Webhooks specification recommends (type,
	// timestamp, data) with Courier's fields beside them. The signature
	// covers the body, so it covers everything a receiver acts on: topic,
	// key, type, version, time, headers and payload. With
	// PublisherConfig.CloudEvents the body is a CloudEvent in the JSON event
	// format instead, signed the same way. See the package documentation.
	BodyEnvelope BodyMode = iota
	// BodyRaw sends the payload as the body, byte for byte, and the rest of
	// the message in Courier-* headers and the message's own headers as
	// request headers. The signature covers only the id, the timestamp and
	// the payload: anyone who captures a request can send it again within
	// the tolerance with other headers (another type, another topic) and
	// the signature still verifies. Use it only for a receiver that needs
	// the bare payload and acts on nothing else; Handler refuses such
	// requests.
	BodyRaw
)

// String returns the mode's name.
func (b BodyMode) String() string {
	switch b {
	case BodyEnvelope:
		return "envelope"
	case BodyRaw:
		return "raw"
	}
	return "BodyMode(" + strconv.Itoa(int(b)) + ")"
}

// Members of the envelope.
const (
	envType        = "type"
	envTimestamp   = "timestamp"
	envTopic       = "topic"
	envKey         = "key"
	envVersion     = "version"
	envContentType = "content_type"
	envHeaders     = "headers"
)

// Content types of a request's body.
const (
	contentTypeEnvelope = "application/json"
)

// envelope returns m as the JSON envelope BodyEnvelope sends:
//
//	{"type":…,"timestamp":…,"topic":…,"key":…,"version":…,
//	 "content_type":…,"headers":{…},"data":… or "data_base64":…}
//
// timestamp is OccurredAt (RFC 3339, UTC), content_type and headers are
// left out when empty, and the payload is data when it is JSON, else
// data_base64 (cloudevents.DataMember). A string that is not valid UTF-8,
// which JSON cannot carry unchanged, is an error naming the field.
func envelope(m *courier.Message) ([]byte, error) {
	if err := cloudevents.CheckUTF8(m); err != nil {
		return nil, fmt.Errorf("webhook: envelope: %w", err)
	}
	b := make([]byte, 0, 192+len(m.Payload)*4/3)
	b = append(b, `{"type":`...)
	b = cloudevents.AppendString(b, m.Type)
	b = append(b, `,"timestamp":"`...)
	b = timestamp.Append(b, m.OccurredAt)
	b = append(b, `","topic":`...)
	b = cloudevents.AppendString(b, m.Topic)
	b = append(b, `,"key":`...)
	b = cloudevents.AppendString(b, m.Key)
	b = append(b, `,"version":`...)
	b = strconv.AppendInt(b, int64(m.Version), 10)
	if m.ContentType != "" {
		b = append(b, `,"content_type":`...)
		b = cloudevents.AppendString(b, m.ContentType)
	}
	if len(m.Headers) > 0 {
		b = append(b, `,"headers":`...)
		var err error
		if b, err = cloudevents.AppendHeaders(b, m.Headers); err != nil {
			return nil, fmt.Errorf("webhook: envelope: %w", err)
		}
	}
	if name, v := cloudevents.DataMember(m.ContentType, m.Payload); name != "" {
		b = append(b, ',', '"')
		b = append(b, name...)
		b = append(b, '"', ':')
		b = append(b, v...)
	}
	return append(b, '}'), nil
}

// decodeBody reads the message a verified body carries: a CloudEvent in
// the JSON event format when it has a specversion member, else Courier's
// envelope, whose id is id (the webhook-id). Everything comes from the
// signed body; no header but the signed webhook-id is read. Errors wrap
// courier.ErrMalformed and name the member.
func decodeBody(id string, body []byte) (courier.Message, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(body, &members); err != nil || members == nil {
		return courier.Message{}, fmt.Errorf("%w: the body is not a JSON object, so not a signed Courier envelope", courier.ErrMalformed)
	}
	if _, ok := members[cloudevents.AttrSpecVersion]; ok {
		return decodeEvent(body)
	}
	bad := func(member, problem string) (courier.Message, error) {
		return courier.Message{}, fmt.Errorf("%w: envelope member %q %s", courier.ErrMalformed, member, problem)
	}
	var m courier.Message
	var err error
	if m.ID, err = uuid.Parse(id); err != nil {
		return courier.Message{}, fmt.Errorf("%w: header %s %q is not a UUID: %v", courier.ErrMalformed, HeaderID, id, err)
	}
	for _, f := range []struct {
		name string
		dst  *string
	}{{envType, &m.Type}, {envTopic, &m.Topic}, {envKey, &m.Key}} {
		raw, ok := members[f.name]
		if !ok {
			return bad(f.name, "is missing")
		}
		if json.Unmarshal(raw, f.dst) != nil || *f.dst == "" {
			return bad(f.name, "is not a non-empty string")
		}
	}
	var ts string
	if raw, ok := members[envTimestamp]; !ok || json.Unmarshal(raw, &ts) != nil {
		return bad(envTimestamp, "is missing or not a string")
	}
	if m.OccurredAt, err = timestamp.Parse(ts); err != nil {
		return bad(envTimestamp, "is not an RFC 3339 time: "+err.Error())
	}
	if raw, ok := members[envVersion]; !ok || json.Unmarshal(raw, &m.Version) != nil || m.Version < 1 {
		return bad(envVersion, "is not an integer of 1 or more")
	}
	if raw, ok := members[envContentType]; ok && json.Unmarshal(raw, &m.ContentType) != nil {
		return bad(envContentType, "is not a string")
	}
	if raw, ok := members[envHeaders]; ok && json.Unmarshal(raw, &m.Headers) != nil {
		return bad(envHeaders, "is not an object of strings")
	}
	if len(m.Headers) == 0 {
		m.Headers = nil
	}
	if m.Payload, err = cloudevents.ReadData(m.ContentType, members["data"], members["data_base64"]); err != nil {
		return courier.Message{}, err
	}
	return m, nil
}

// decodeEvent reads the message of a CloudEvent in the JSON event format,
// which must name its topic (couriertopic).
func decodeEvent(body []byte) (courier.Message, error) {
	e, err := cloudevents.ParseJSON(body)
	if err != nil {
		return courier.Message{}, err
	}
	m, err := e.Message()
	if err != nil {
		return courier.Message{}, err
	}
	if m.Topic == "" {
		return courier.Message{}, fmt.Errorf("%w: CloudEvent member %q is missing: Courier needs the topic", courier.ErrMalformed, cloudevents.AttrTopic)
	}
	return m, nil
}
