package cloudevents

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"mime"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/internal/timestamp"
)

// MediaTypeJSON is the media type of an event in the JSON event format
// (the HTTP binding's structured content mode).
const MediaTypeJSON = "application/cloudevents+json"

// Courier's extension attributes in the JSON event format, besides
// AttrVersion. A structured event carries everything a Courier message
// holds, so a receiver that verifies the event's bytes (a signed webhook)
// needs no header beside it.
const (
	// AttrTopic is the message's topic.
	AttrTopic = "couriertopic"
	// AttrHeaders is the message's headers: a JSON object of strings,
	// written as a string (CloudEvents attributes hold no objects).
	AttrHeaders = "courierheaders"
)

// Data members of the JSON event format.
const (
	memberData       = "data"
	memberDataBase64 = "data_base64"
)

// Event is a CloudEvent in the JSON event format, as ParseJSON reads it.
type Event struct {
	// SpecVersion, ID, Source and Type are the required attributes.
	SpecVersion, ID, Source, Type string
	// Subject, DataContentType and DataSchema are "" when absent.
	Subject, DataContentType, DataSchema string
	// Time is zero when absent.
	Time time.Time
	// Extensions holds the extension attributes by name: a string, an
	// int32 or a bool, the types JSON gives them (Binary, URI and
	// Timestamp values are strings in JSON).
	Extensions map[string]any
	// Data is the event's data: the decoded bytes of data_base64, the JSON
	// text of data when DataContentType is JSON or absent, the string of
	// data otherwise. nil when the event has none.
	Data []byte
}

// ParseJSON reads one event in the JSON event format (CloudEvents 1.0) and
// checks it as the specification asks: specversion 1.0; id, source and
// type non-empty strings; subject, if present, a non-empty string;
// datacontenttype a media type (type/subtype); dataschema an absolute URI;
// time an RFC 3339 timestamp; extension names of lower-case letters and
// digits with string, boolean or 32-bit integer values; data and
// data_base64 not both. An optional attribute set to null is absent.
// Errors wrap courier.ErrMalformed and name the member.
func ParseJSON(b []byte) (Event, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(b, &members); err != nil {
		return Event{}, fmt.Errorf("%w: not a CloudEvent in the JSON format: %v", courier.ErrMalformed, err)
	}
	if members == nil {
		return Event{}, fmt.Errorf("%w: not a CloudEvent in the JSON format: the document is null, not an object", courier.ErrMalformed)
	}
	return parseMembers(members)
}

// ParseJSONBatch reads a batch of the JSON event format: an array of
// events, each checked as ParseJSON checks one. Errors name the event's
// index.
func ParseJSONBatch(b []byte) ([]Event, error) {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("%w: not a CloudEvents batch in the JSON format (an array of events): %v", courier.ErrMalformed, err)
	}
	events := make([]Event, 0, len(raw))
	for i, r := range raw {
		e, err := ParseJSON(r)
		if err != nil {
			return nil, fmt.Errorf("event %d of the batch: %w", i, err)
		}
		events = append(events, e)
	}
	return events, nil
}

func parseMembers(members map[string]json.RawMessage) (Event, error) {
	bad := func(member, problem string) (Event, error) {
		return Event{}, fmt.Errorf("%w: CloudEvent member %q %s", courier.ErrMalformed, member, problem)
	}
	var e Event
	for _, a := range []struct {
		name     string
		dst      *string
		required bool
	}{
		{AttrSpecVersion, &e.SpecVersion, true}, {AttrID, &e.ID, true}, {AttrSource, &e.Source, true}, {AttrType, &e.Type, true},
		{AttrSubject, &e.Subject, false}, {AttrDataContentType, &e.DataContentType, false}, {AttrDataSchema, &e.DataSchema, false},
	} {
		v, problem := stringMember(members, a.name, a.required)
		if problem != "" {
			return bad(a.name, problem)
		}
		*a.dst = v
		if a.name == AttrSpecVersion && v != SpecVersion {
			return bad(a.name, fmt.Sprintf("is %q: only %q is understood", v, SpecVersion))
		}
	}
	if _, err := url.Parse(e.Source); err != nil {
		return bad(AttrSource, "is not a URI reference")
	}
	if e.DataContentType != "" && !isMediaType(e.DataContentType) {
		return bad(AttrDataContentType, fmt.Sprintf("is %q, not a media type such as \"application/json\" (RFC 2046)", e.DataContentType))
	}
	if u, err := url.Parse(e.DataSchema); e.DataSchema != "" && (err != nil || !u.IsAbs()) {
		return bad(AttrDataSchema, "is not an absolute URI")
	}
	t, problem := stringMember(members, AttrTime, false)
	if problem != "" {
		return bad(AttrTime, problem)
	}
	if t != "" {
		var err error
		if e.Time, err = parseTime(t); err != nil {
			return bad(AttrTime, err.Error())
		}
	}
	var err error
	if e.Data, err = ReadData(e.DataContentType, members[memberData], members[memberDataBase64]); err != nil {
		return Event{}, err
	}
	for name, raw := range members {
		if coreMember(name) {
			continue
		}
		if !validExtensionName(name) {
			return bad(name, "is not a valid attribute name: use lower-case letters and digits only")
		}
		v, err := extensionValue(raw)
		if err != nil {
			return bad(name, err.Error())
		}
		if v == nil {
			continue
		}
		if e.Extensions == nil {
			e.Extensions = map[string]any{}
		}
		e.Extensions[name] = v
	}
	return e, nil
}

// stringMember returns the string member name of an event, "" when it is
// absent or null, and what is wrong with it: missing (when required), not
// a string, empty.
func stringMember(members map[string]json.RawMessage, name string, required bool) (string, string) {
	raw, ok := members[name]
	if !ok || isNull(raw) {
		if required {
			return "", "is missing"
		}
		return "", ""
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", "is not a string"
	}
	if s == "" {
		return "", "is empty"
	}
	return s, ""
}

func coreMember(name string) bool {
	switch name {
	case AttrSpecVersion, AttrID, AttrSource, AttrType, AttrSubject, AttrTime, AttrDataContentType, AttrDataSchema, memberData, memberDataBase64:
		return true
	}
	return false
}

// validExtensionName reports whether name is a CloudEvents attribute name:
// lower-case ASCII letters and digits.
func validExtensionName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// extensionValue reads an extension attribute's JSON value: a string, a
// bool or an integer within int32 (CloudEvents' Integer); nil for null.
func extensionValue(raw json.RawMessage) (any, error) {
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	switch v := v.(type) {
	case nil, string, bool:
		return v, nil
	case json.Number:
		n, err := strconv.ParseInt(v.String(), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("is %s, not an integer between %d and %d", v, math.MinInt32, math.MaxInt32)
		}
		return int32(n), nil
	}
	return nil, errors.New("is an object or an array: attribute values are strings, numbers or booleans")
}

func isNull(raw json.RawMessage) bool { return string(raw) == "null" }

// isMediaType reports whether s is a media type with parameters
// ("text/plain; charset=utf-8"): mime.ParseMediaType alone takes a bare
// token.
func isMediaType(s string) bool {
	mt, _, err := mime.ParseMediaType(s)
	if err != nil {
		return false
	}
	typ, sub, ok := strings.Cut(mt, "/")
	return ok && typ != "" && sub != "" && !strings.Contains(sub, "/")
}

// IsJSON reports whether the media type contentType is JSON:
// application/json, text/json or any type with the +json suffix.
func IsJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json")
}

// parseTime reads an RFC 3339 timestamp as written (see
// timestamp.ParseRFC3339).
func parseTime(s string) (time.Time, error) {
	t, err := timestamp.ParseRFC3339(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("is not an RFC 3339 time: %v", err)
	}
	return t, nil
}

// DataMember returns how the JSON formats (this package's and the webhook
// envelope) carry payload: as "data", the payload itself, when
// contentType is JSON and the payload is one JSON value in UTF-8 without
// surrounding white space (so it comes back byte for byte); else as
// "data_base64", its base64 in a JSON string. An empty payload has no
// member: name is "".
func DataMember(contentType string, payload []byte) (name string, value []byte) {
	if len(payload) == 0 {
		return "", nil
	}
	if IsJSON(contentType) && utf8.Valid(payload) && json.Valid(payload) &&
		len(bytes.TrimSpace(payload)) == len(payload) && string(payload) != "null" {
		return memberData, payload
	}
	v := make([]byte, 0, base64.StdEncoding.EncodedLen(len(payload))+2)
	v = append(v, '"')
	v = base64.StdEncoding.AppendEncode(v, payload)
	return memberDataBase64, append(v, '"')
}

// ReadData returns the payload the members data and data_base64 (either
// nil when absent) carry, as DataMember writes them and the JSON event
// format defines them: data_base64 decoded; data as it is when
// contentType is JSON or empty, else the string data holds. Both members,
// data_base64 not a base64 string, or data of another type neither JSON
// nor a string, are errors wrapping courier.ErrMalformed.
func ReadData(contentType string, data, dataBase64 json.RawMessage) ([]byte, error) {
	if data != nil && isNull(data) {
		data = nil
	}
	if dataBase64 != nil && isNull(dataBase64) {
		dataBase64 = nil
	}
	switch {
	case data != nil && dataBase64 != nil:
		return nil, fmt.Errorf("%w: both data and data_base64 are present: send one", courier.ErrMalformed)
	case dataBase64 != nil:
		var s string
		if err := json.Unmarshal(dataBase64, &s); err != nil {
			return nil, fmt.Errorf("%w: data_base64 is not a string", courier.ErrMalformed)
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("%w: data_base64 is not base64: %v", courier.ErrMalformed, err)
		}
		return b, nil
	case data == nil:
		return nil, nil
	case contentType == "" || IsJSON(contentType):
		return bytes.Clone(data), nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%w: data of datacontenttype %q is not a JSON string: send other data as data_base64", courier.ErrMalformed, contentType)
	}
	return []byte(s), nil
}

// attr returns the value of attribute name as a string, the form the
// binary content mode carries, "" when absent.
func (e *Event) attr(name string) string {
	switch name {
	case AttrSpecVersion:
		return e.SpecVersion
	case AttrID:
		return e.ID
	case AttrSource:
		return e.Source
	case AttrType:
		return e.Type
	case AttrSubject:
		return e.Subject
	case AttrDataContentType:
		return e.DataContentType
	case AttrDataSchema:
		return e.DataSchema
	case AttrTime:
		if e.Time.IsZero() {
			return ""
		}
		return e.Time.Format(time.RFC3339Nano)
	}
	switch v := e.Extensions[name].(type) {
	case string:
		return v
	case int32:
		return strconv.Itoa(int(v))
	case bool:
		return strconv.FormatBool(v)
	}
	return ""
}

// Message returns the Courier message e carries, by the rules of Decode
// (id, type, subject as the key, time, courierversion), with the topic
// from couriertopic ("" when absent: the caller knows it), the content
// type from datacontenttype, the payload from the data and the headers
// from courierheaders. Errors wrap courier.ErrMalformed.
func (e *Event) Message() (courier.Message, error) {
	m, err := Decode("", e.attr)
	if err != nil {
		return courier.Message{}, err
	}
	m.Topic = e.attr(AttrTopic)
	m.ContentType = e.DataContentType
	m.Payload = e.Data
	if h, ok := e.Extensions[AttrHeaders]; ok {
		s, _ := h.(string)
		if err := json.Unmarshal([]byte(s), &m.Headers); err != nil || m.Headers == nil {
			return courier.Message{}, fmt.Errorf("%w: CloudEvent member %q is not a JSON object of strings in a string", courier.ErrMalformed, AttrHeaders)
		}
	}
	return m, nil
}

// JSON returns m as an event in the JSON event format (MediaTypeJSON):
// the attributes of Attributes, datacontenttype, couriertopic,
// courierheaders when m has headers, and the payload as DataMember writes
// it. Every string must be valid UTF-8, which JSON cannot carry otherwise;
// an error names the field that is not.
func (c *Config) JSON(m *courier.Message) ([]byte, error) {
	if err := CheckUTF8(m); err != nil {
		return nil, fmt.Errorf("cloudevents: %w", err)
	}
	b := make([]byte, 0, 256+len(m.Payload)*4/3)
	b = append(b, '{')
	for i, a := range c.Attributes("", m) {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendString(b, a.Name)
		b = append(b, ':')
		if a.Name == AttrVersion && m.Version >= math.MinInt32 && m.Version <= math.MaxInt32 {
			b = strconv.AppendInt(b, int64(m.Version), 10) // an Integer; a larger one stays a string
			continue
		}
		b = AppendString(b, a.Value)
	}
	if m.ContentType != "" {
		b = append(b, `,"datacontenttype":`...)
		b = AppendString(b, m.ContentType)
	}
	b = append(b, `,"couriertopic":`...)
	b = AppendString(b, m.Topic)
	if len(m.Headers) > 0 {
		h, err := AppendHeaders(nil, m.Headers)
		if err != nil {
			return nil, fmt.Errorf("cloudevents: %w", err)
		}
		b = append(b, `,"courierheaders":`...)
		b = AppendString(b, string(h))
	}
	if name, v := DataMember(m.ContentType, m.Payload); name != "" {
		b = append(b, ',', '"')
		b = append(b, name...)
		b = append(b, '"', ':')
		b = append(b, v...)
	}
	return append(b, '}'), nil
}

// CheckUTF8 returns an error naming the first of m's Topic, Key, Type and
// ContentType that is not valid UTF-8, which the JSON formats (this
// package's and the webhook envelope) cannot carry unchanged.
func CheckUTF8(m *courier.Message) error {
	for _, f := range [...]struct{ name, value string }{{"Topic", m.Topic}, {"Key", m.Key}, {"Type", m.Type}, {"ContentType", m.ContentType}} {
		if !utf8.ValidString(f.value) {
			return fmt.Errorf("the message's %s is not valid UTF-8, which JSON cannot carry unchanged", f.name)
		}
	}
	return nil
}

// AppendHeaders appends h to b as a JSON object of strings, sorted by name,
// as the JSON formats carry a message's headers. It fails, naming the
// header, when a name or value is not valid UTF-8.
func AppendHeaders(b []byte, h map[string]string) ([]byte, error) {
	b = append(b, '{')
	for i, k := range slices.Sorted(maps.Keys(h)) {
		v := h[k]
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, fmt.Errorf("header %q of the message is not valid UTF-8, which JSON cannot carry unchanged", k)
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendString(b, k)
		b = append(b, ':')
		b = AppendString(b, v)
	}
	return append(b, '}'), nil
}

// AppendString appends s to b as a JSON string. s must be valid UTF-8;
// nothing but '"', '\\' and control characters is escaped (U+2028 and
// U+2029 too, for JavaScript).
func AppendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
