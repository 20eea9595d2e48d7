package contract

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Text is a string field of a vector's message. In JSON it is one of
//
//   - a string: the text itself;
//   - {"repeat": "x", "count": N}: the string written N times, so that a
//     vector over a length limit stays small;
//   - {"base64": "..."}: the bytes the base64 decodes to, for a value that
//     is not valid UTF-8 and so cannot be a JSON string.
type Text struct {
	s      string
	repeat string
	count  int
}

// Plain returns the Text s, written as a JSON string when s is valid UTF-8
// and as {"base64": …} otherwise.
func Plain(s string) Text { return Text{s: s} }

// Repeat returns the Text of s written count times, written in JSON as
// {"repeat": s, "count": count}.
func Repeat(s string, count int) Text {
	return Text{s: strings.Repeat(s, count), repeat: s, count: count}
}

// String returns the text.
func (t Text) String() string { return t.s }

// repeated is the JSON form of a Text or Bytes written with Repeat.
type repeated struct {
	Repeat string `json:"repeat"`
	Count  int    `json:"count"`
}

// raw is the JSON form of a Text that is not valid UTF-8.
type raw struct {
	Base64 string `json:"base64"`
}

// MarshalJSON implements json.Marshaler.
func (t Text) MarshalJSON() ([]byte, error) {
	switch {
	case t.count > 0 && utf8.ValidString(t.repeat):
		return marshal(repeated{t.repeat, t.count})
	case !utf8.ValidString(t.s):
		return marshal(raw{base64.StdEncoding.EncodeToString([]byte(t.s))})
	}
	return marshal(t.s)
}

// UnmarshalJSON implements json.Unmarshaler.
func (t *Text) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		*t = Text{}
		return json.Unmarshal(b, &t.s)
	}
	var form struct {
		Repeat *string `json:"repeat"`
		Count  int     `json:"count"`
		Base64 *string `json:"base64"`
	}
	if err := strictUnmarshal(b, &form); err != nil {
		return fmt.Errorf("contract: a text is a string, {\"repeat\": s, \"count\": n} or {\"base64\": b}: %w", err)
	}
	switch {
	case form.Repeat != nil && form.Base64 == nil && form.Count > 0:
		*t = Repeat(*form.Repeat, form.Count)
	case form.Base64 != nil && form.Repeat == nil:
		s, err := base64.StdEncoding.DecodeString(*form.Base64)
		if err != nil {
			return fmt.Errorf("contract: text's base64: %w", err)
		}
		*t = Text{s: string(s)}
	default:
		return fmt.Errorf("contract: a text is a string, {\"repeat\": s, \"count\": n > 0} or {\"base64\": b}, not %s", b)
	}
	return nil
}

// Bytes is a message's payload. In JSON it is the bytes in base64 or, for
// a large payload, {"repeat": "x", "count": N}: the UTF-8 bytes of the
// string written N times.
type Bytes struct {
	b      []byte
	repeat string
	count  int
}

// BytesOf returns the Bytes b, written in base64.
func BytesOf(b []byte) Bytes { return Bytes{b: b} }

// RepeatBytes returns the bytes of s written count times, written in JSON
// as {"repeat": s, "count": count}.
func RepeatBytes(s string, count int) Bytes {
	return Bytes{b: bytes.Repeat([]byte(s), count), repeat: s, count: count}
}

// Bytes returns the bytes.
func (p Bytes) Bytes() []byte { return p.b }

// MarshalJSON implements json.Marshaler.
func (p Bytes) MarshalJSON() ([]byte, error) {
	if p.count > 0 {
		return marshal(repeated{p.repeat, p.count})
	}
	return marshal(base64.StdEncoding.EncodeToString(p.b))
}

// UnmarshalJSON implements json.Unmarshaler.
func (p *Bytes) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		d, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return fmt.Errorf("contract: payload_base64: %w", err)
		}
		*p = BytesOf(d)
		return nil
	}
	var r repeated
	if err := strictUnmarshal(b, &r); err != nil || r.Count <= 0 {
		return fmt.Errorf("contract: payload_base64 is base64 text or {\"repeat\": s, \"count\": n > 0}, not %s", b)
	}
	*p = RepeatBytes(r.Repeat, r.Count)
	return nil
}

// marshal encodes v as JSON without escaping <, > and &, so the vectors
// read as they are.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// strictUnmarshal decodes b into v, refusing unknown fields.
func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
