package columns

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
)

// Message is the one description of the columns that hold a message, in
// the order every statement lists them: in courier_outbox and the three
// tables that mirror it (courier_outbox_scheduled,
// courier_outbox_dead_letters, courier_outbox_published). Every column list,
// row of placeholders, INSERT, row scan and the table-less log encoding of
// every dialect is computed from it, once, when the package loads.
//
// Adding a column: a migration per dialect adds it to the four tables (and,
// on PostgreSQL, to the functions that copy rows between them), the field
// goes into courier.Message, and one line goes at the end of this list.
// Columns are only ever appended: the log encoding of table-less messages
// (LogOnly) reads older writers' messages by their number of columns.
var Message = []Column{
	{"message_id", "ID", UUID, func(m *courier.Message) any { return &m.ID }},
	{"topic", "Topic", String, func(m *courier.Message) any { return &m.Topic }},
	{"ordering_key", "Key", String, func(m *courier.Message) any { return &m.Key }},
	{"type", "Type", String, func(m *courier.Message) any { return &m.Type }},
	{"version", "Version", Int, func(m *courier.Message) any { return &m.Version }},
	{"content_type", "ContentType", String, func(m *courier.Message) any { return &m.ContentType }},
	{"payload", "Payload", Bytes, func(m *courier.Message) any { return &m.Payload }},
	{"headers", "Headers", Headers, func(m *courier.Message) any { return &m.Headers }},
	{"occurred_at", "OccurredAt", Time, func(m *courier.Message) any { return &m.OccurredAt }},
}

// Column is one column of Message.
type Column struct {
	// Name is the column's name in every dialect's tables.
	Name string
	// Field is the name of the courier.Message field it holds.
	Field string
	// Kind says how the column is bound and scanned.
	Kind Kind
	// Of returns a pointer to the field in m, of Kind's Go type.
	Of func(m *courier.Message) any
}

// Kind is how a column's field is bound as a parameter, scanned from a
// row and encoded in the log: each has its Go type, which Column.Of points
// to, and its PostgreSQL type.
type Kind int

// The kinds of Message's columns.
const (
	// UUID is a uuid.UUID: PostgreSQL's uuid, its text elsewhere.
	UUID Kind = iota
	// String is a string.
	String
	// Int is an int: PostgreSQL's int (int4).
	Int
	// Bytes is a []byte, never NULL: an empty one stands for nil.
	Bytes
	// Headers is a map[string]string held as a JSON object, NULL when empty.
	Headers
	// Time is a time.Time, read back in UTC.
	Time
)

// kinds holds what differs between the kinds: the Go type Column.Of
// points to and the PostgreSQL type of the column.
var kinds = [...]struct {
	goType any
	pgType string
}{
	UUID:    {(*uuid.UUID)(nil), "uuid"},
	String:  {(*string)(nil), "text"},
	Int:     {(*int)(nil), "int"},
	Bytes:   {(*[]byte)(nil), "bytea"},
	Headers: {(*map[string]string)(nil), "jsonb"},
	Time:    {(*time.Time)(nil), "timestamptz"},
}

// PGType is the column's PostgreSQL type, as in "$1::text[]".
func (c Column) PGType() string { return kinds[c.Kind].pgType }

// Lists computed from Message when the package loads.
var (
	// Names are Message's column names, in order, as a list such as
	// "message_id, topic, …".
	Names = List("")
	// Marks is a row of ? placeholders for Message's columns, without
	// parentheses: "?, ?, …".
	Marks = strings.TrimSuffix(strings.Repeat("?, ", len(Message)), ", ")
)

func init() {
	if err := check(Message); err != nil {
		panic(err)
	}
}

// check returns an error, naming the column and the fix, when a column of
// cols cannot be bound or scanned as its Kind says, or repeats a name.
func check(cols []Column) error {
	var m courier.Message
	seen := map[string]bool{}
	for i, c := range cols {
		if c.Kind < 0 || int(c.Kind) >= len(kinds) || c.Of == nil {
			return fmt.Errorf("columns: column %d (%s) needs a Kind (UUID, String, Int, Bytes, Headers or Time) and an Of", i, c.Name)
		}
		if got, want := fmt.Sprintf("%T", c.Of(&m)), fmt.Sprintf("%T", kinds[c.Kind].goType); got != want {
			return fmt.Errorf("columns: column %s (courier.Message.%s): Of points to a %s, and its Kind holds a %s: fix its Kind or its Of", c.Name, c.Field, got, want)
		}
		if seen[c.Name] {
			return fmt.Errorf("columns: column %s (courier.Message.%s) is listed twice: give the column another name", c.Name, c.Field)
		}
		seen[c.Name] = true
	}
	return nil
}

// List returns Message's column names, each after prefix, as a list
// ("o.message_id, o.topic, …" for "o."): what a SELECT or RETURNING reads
// of a table's message.
func List(prefix string) string {
	return ListWith(prefix, nil)
}

// ListWith is List with the expressions of replace for the columns it
// names: "coalesce(s.payload, ”)" in place of s.payload, say.
func ListWith(prefix string, replace map[string]string) string {
	names := make([]string, len(Message))
	for i, c := range Message {
		names[i] = prefix + c.Name
		if e, ok := replace[c.Name]; ok {
			names[i] = e
		}
	}
	return strings.Join(names, ", ")
}

// Params returns PostgreSQL's placeholders for Message's columns, the first
// numbered first: "$1, $2, …" for 1.
func Params(first int) string {
	p := make([]string, len(Message))
	for i := range Message {
		p[i] = "$" + strconv.Itoa(first+i)
	}
	return strings.Join(p, ", ")
}

// Unnest returns PostgreSQL's array placeholders of Message's columns, as
// unnest takes them, the first numbered first: "$1::uuid[], $2::text[], …"
// for 1. [Arrays] are their arguments.
func Unnest(first int) string {
	p := make([]string, len(Message))
	for i, c := range Message {
		p[i] = "$" + strconv.Itoa(first+i) + "::" + c.PGType() + "[]"
	}
	return strings.Join(p, ", ")
}

// Param is the PostgreSQL placeholder of the n-th column after Message's,
// whose first is numbered first: Param(1, 1) is the one after Unnest(1)'s.
func Param(first, n int) string { return "$" + strconv.Itoa(first+len(Message)-1+n) }
