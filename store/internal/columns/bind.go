package columns

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
)

// AppendArgs appends m's Message columns to args as database/sql
// parameters: the id as text, the payload never nil, the headers as text
// (see HeadersText), times as at encodes them.
func AppendArgs(args []any, m *courier.Message, at func(time.Time) any) []any {
	for _, c := range Message {
		switch p := c.Of(m).(type) {
		case *uuid.UUID:
			args = append(args, p.String())
		case *[]byte:
			args = append(args, Payload(*p))
		case *map[string]string:
			args = append(args, HeadersText(*p))
		case *time.Time:
			args = append(args, at(*p))
		case *string:
			args = append(args, *p)
		case *int:
			args = append(args, *p)
		}
	}
	return args
}

// AppendPgx appends m's Message columns to args as pgx parameters: the id
// as [16]byte (which pgx encodes as binary, where uuid.UUID and strings
// would try binary and fail first), the payload never nil, the headers as
// JSON (nil, NULL, when there are none).
func AppendPgx(args []any, m *courier.Message) []any {
	for _, c := range Message {
		switch p := c.Of(m).(type) {
		case *uuid.UUID:
			args = append(args, [16]byte(*p))
		case *[]byte:
			args = append(args, Payload(*p))
		case *map[string]string:
			args = append(args, HeadersJSON(*p))
		case *time.Time:
			args = append(args, *p)
		case *string:
			args = append(args, *p)
		case *int:
			args = append(args, *p)
		}
	}
	return args
}

// Arrays returns one array a Message column of n messages, msg(i) the i-th,
// in order: the arguments of [Unnest], whose statement text (and cached
// plan) is the same whatever the number of messages.
func Arrays(n int, msg func(i int) *courier.Message) []any {
	arrays := make([]any, len(Message))
	for j, c := range Message {
		switch c.Kind {
		case UUID:
			a := make([][16]byte, n)
			for i := range a {
				a[i] = [16]byte(*c.Of(msg(i)).(*uuid.UUID))
			}
			arrays[j] = a
		case String:
			a := make([]string, n)
			for i := range a {
				a[i] = *c.Of(msg(i)).(*string)
			}
			arrays[j] = a
		case Int:
			a := make([]int32, n)
			for i := range a {
				a[i] = int32(*c.Of(msg(i)).(*int))
			}
			arrays[j] = a
		default:
			arrays[j] = array(c, n, msg)
		}
	}
	return arrays
}

// array is Arrays' array of the column c, of a kind other than UUID, String
// and Int.
func array(c Column, n int, msg func(i int) *courier.Message) any {
	switch c.Kind {
	case Bytes:
		a := make([][]byte, n)
		for i := range a {
			a[i] = Payload(*c.Of(msg(i)).(*[]byte))
		}
		return a
	case Headers:
		a := make([]*string, n)
		for i := range a {
			if h := HeadersJSON(*c.Of(msg(i)).(*map[string]string)); h != nil {
				s := string(h)
				a[i] = &s
			}
		}
		return a
	}
	a := make([]time.Time, n)
	for i := range a {
		a[i] = *c.Of(msg(i)).(*time.Time)
	}
	return a
}

// AppendDests appends the scan destinations of m's Message columns to dst,
// for pgx, which scans every kind into its field; Finish completes the
// message once the row is scanned.
func AppendDests(dst []any, m *courier.Message) []any {
	for _, c := range Message {
		dst = append(dst, c.Of(m))
	}
	return dst
}

// AppendSQLDests appends the scan destinations of m's Message columns to
// dst, for database/sql: a JSON column's text is kept for DecodeSQL, a
// time column goes into timeDest's destination. DecodeSQL completes the
// message once the row is scanned.
func AppendSQLDests(dst []any, m *courier.Message, timeDest func(*time.Time) any) []any {
	for _, c := range Message {
		switch p := c.Of(m).(type) {
		case *map[string]string:
			dst = append(dst, &jsonText{into: p, name: c.Name})
		case *time.Time:
			dst = append(dst, timeDest(p))
		default:
			dst = append(dst, p)
		}
	}
	return dst
}

// jsonText is the scan destination of a JSON column: its text, which
// DecodeSQL decodes into the field.
type jsonText struct {
	text []byte
	into *map[string]string
	name string
}

// Scan implements sql.Scanner.
func (j *jsonText) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		j.text = nil
	case []byte:
		j.text = append(j.text[:0], v...) // the driver's, until the next Scan
	case string:
		j.text = []byte(v)
	default:
		return fmt.Errorf("%s: cannot read %T as JSON text", j.name, src)
	}
	return nil
}

// DecodeSQL completes m, whose columns AppendSQLDests' destinations dests
// scanned: it decodes the JSON columns, naming the row ("headers of row 7"
// for what "row" and id 7) when one does not decode, then does Finish.
func DecodeSQL(m *courier.Message, dests []any, what string, id int64) error {
	for _, d := range dests {
		if j, ok := d.(*jsonText); ok && len(j.text) > 0 {
			if err := json.Unmarshal(j.text, j.into); err != nil {
				return fmt.Errorf("%s of %s %d: %w", j.name, what, id, err)
			}
		}
	}
	Finish(m)
	return nil
}

// Finish completes a scanned message: a NULL or empty byte column becomes
// an empty slice, times are in UTC.
func Finish(m *courier.Message) {
	for _, c := range Message {
		switch p := c.Of(m).(type) {
		case *[]byte:
			*p = Payload(*p)
		case *time.Time:
			*p = p.UTC()
		}
	}
}

// ByName returns the Message column named name, false when there is none.
func ByName(name string) (Column, bool) {
	c, ok := byName[name]
	return c, ok
}

// byName holds Message's columns by name.
var byName = func() map[string]Column {
	m := make(map[string]Column, len(Message))
	for _, c := range Message {
		m[c.Name] = c
	}
	return m
}()

// DeadLetterDests is AppendSQLDests for a row of
// courier_outbox_dead_letters read by an operator: its message_id is
// scanned as the text it is stored as, into d.MessageID, so that a row
// whose id is not a UUID (put there by another writer) is still read,
// shown, replayed and discarded; SetDeadLetter then leaves d.MessageID as
// it is.
func DeadLetterDests(dst []any, d *store.DeadLetter, m *courier.Message, timeDest func(*time.Time) any) []any {
	n := len(dst)
	dst = AppendSQLDests(dst, m, timeDest)
	for i, c := range Message {
		if c.Field == "ID" {
			dst[n+i] = &d.MessageID
		}
	}
	return dst
}

// SetDeadLetter sets the fields of d that hold a message to m's: a dead
// letter's row holds the Message columns. d.MessageID is set only when it
// is empty (DeadLetterDests scans it as stored).
func SetDeadLetter(d *store.DeadLetter, m *courier.Message) {
	if d.MessageID == "" {
		d.MessageID = m.ID.String()
	}
	d.Topic, d.Key, d.Type, d.Version = m.Topic, m.Key, m.Type, m.Version
	d.ContentType, d.Payload, d.Headers, d.OccurredAt = m.ContentType, m.Payload, m.Headers, m.OccurredAt
}
