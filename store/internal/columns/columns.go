package columns

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/courier-go/courier"
)

// HistoryCap is the most failures a message's history keeps: the relay's
// statements that append a failure drop the oldest one beyond it, in every
// dialect.
const HistoryCap = 20

// Payload returns p, or an empty slice when p is nil: payload columns are
// NOT NULL, and an empty payload is a payload.
func Payload(p []byte) []byte {
	if p == nil {
		return []byte{}
	}
	return p
}

// HeadersJSON encodes headers as a JSON object, nil (NULL) when there are
// none.
func HeadersJSON(h map[string]string) []byte {
	if len(h) == 0 {
		return nil
	}
	b, _ := json.Marshal(h) // a map of strings always encodes
	return b
}

// HeadersText is HeadersJSON as a string parameter, for drivers that would
// send a []byte as binary to a JSON or TEXT column; nil when there are no
// headers.
func HeadersText(h map[string]string) any {
	if b := HeadersJSON(h); b != nil {
		return string(b)
	}
	return nil
}

// Insert returns one INSERT of msgs into courier_outbox and its arguments,
// built without I/O. Each message is a VALUES tuple row, with ? placeholders:
// its columns are Names (times encoded by at) and then more, a list such as
// ", created_at" or "", whose values are values (", ?" or
// ", UTC_TIMESTAMP(6)") with arguments extra. Headers are sent as text (see
// HeadersText).
func Insert(msgs []courier.Message, at func(time.Time) any, more, values string, extra ...any) (string, []any) {
	return InsertInto("courier_outbox", msgs, at, more, values, extra...)
}

// InsertInto is Insert into table, which has the outbox's columns.
func InsertInto(table string, msgs []courier.Message, at func(time.Time) any, more, values string, extra ...any) (string, []any) {
	var q strings.Builder
	row := "(" + Marks + values + ")"
	q.Grow(len(table) + len(Names) + len(more) + 30 + len(msgs)*(len(row)+2))
	q.WriteString("INSERT INTO " + table + " (" + Names + more + ") VALUES ")
	args := make([]any, 0, len(msgs)*(len(Message)+len(extra)))
	for i := range msgs {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString(row)
		args = AppendArgs(args, &msgs[i], at)
		args = append(args, extra...)
	}
	return q.String(), args
}

// Steps encodes a saga's pending steps as the JSON array its pending column
// holds ("null" when there are none, as always).
func Steps(steps []int) string {
	b, _ := json.Marshal(steps) // a list of ints always encodes
	return string(b)
}

// ParseSteps decodes a pending column written by Steps.
func ParseSteps(b []byte) ([]int, error) {
	var steps []int
	err := json.Unmarshal(b, &steps)
	return steps, err
}

// Text returns b as a text parameter, nil (NULL) when it is empty.
func Text(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}

// JSONOrNull encodes v as JSON text, or returns nil (NULL) when n, its
// length, is 0.
func JSONOrNull(v any, n int) (any, error) {
	if n == 0 {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// DecodeJSON decodes a JSON column into v unless it is NULL or empty; what
// and id name the column's row in the error ("history of dead letter 7").
func DecodeJSON(b []byte, v any, what string, id int64) error {
	if len(b) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s %d: %w", what, id, err)
	}
	return nil
}
