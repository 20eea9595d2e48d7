package columns

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
)

func TestInsert(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	id := uuid.MustParse("0192f3a4-0000-7000-8000-000000000001")
	msgs := []courier.Message{
		{ID: id, Topic: "t", Key: "k", Type: "x", Version: 1, ContentType: "application/json", OccurredAt: at},
		{ID: id, Topic: "u", Headers: map[string]string{"a": "b"}, Payload: []byte("p"), OccurredAt: at},
	}
	q, args := Insert(msgs, func(t time.Time) any { return t.UnixMicro() }, ", created_at", ", ?", int64(7))
	want := "INSERT INTO courier_outbox (" + Names + ", created_at) VALUES (" + Marks + ", ?), (" + Marks + ", ?)"
	if q != want {
		t.Fatalf("query:\n%s\nwant\n%s", q, want)
	}
	row := len(Message) + 1
	if len(args) != 2*row {
		t.Fatalf("%d arguments, want %d", len(args), 2*row)
	}
	first := []any{id.String(), "t", "k", "x", 1, "application/json", []byte{}, nil, at.UnixMicro()}
	if args[row-1] != int64(7) {
		t.Errorf("created_at of the first row = %#v", args[row-1])
	}
	for i, a := range first {
		if b, ok := a.([]byte); ok {
			if !slices.Equal(args[i].([]byte), b) {
				t.Errorf("argument %d = %v, want %v", i, args[i], a)
			}
			continue
		}
		if args[i] != a {
			t.Errorf("argument %d = %#v, want %#v", i, args[i], a)
		}
	}
	if args[row+7] != `{"a":"b"}` {
		t.Errorf("headers of the second row = %#v", args[row+7])
	}
}

func TestInsertWithoutMore(t *testing.T) {
	q, args := Insert(make([]courier.Message, 1), func(t time.Time) any { return t }, "", "")
	if q != "INSERT INTO courier_outbox ("+Names+") VALUES ("+Marks+")" || len(args) != len(Message) {
		t.Fatalf("Insert = %q with %d arguments", q, len(args))
	}
}

func TestJSONColumns(t *testing.T) {
	if v, err := JSONOrNull(map[string]string{}, 0); v != nil || err != nil {
		t.Errorf("JSONOrNull of nothing = %v, %v", v, err)
	}
	if v, err := JSONOrNull([]int{1}, 1); v != "[1]" || err != nil {
		t.Errorf("JSONOrNull = %v, %v", v, err)
	}
	var h map[string]string
	if err := DecodeJSON(nil, &h, "headers of row", 1); err != nil || h != nil {
		t.Errorf("DecodeJSON(NULL) = %v, %v", h, err)
	}
	if err := DecodeJSON([]byte("{"), &h, "headers of row", 7); err == nil || !strings.HasPrefix(err.Error(), "headers of row 7: ") {
		t.Errorf("DecodeJSON of bad JSON = %v", err)
	}
	if s := Steps([]int{2, 1}); s != "[2,1]" {
		t.Errorf("Steps = %s", s)
	}
	if s := Steps(nil); s != "null" {
		t.Errorf("Steps(nil) = %s", s)
	}
	if steps, err := ParseSteps([]byte("[2,1]")); err != nil || !slices.Equal(steps, []int{2, 1}) {
		t.Errorf("ParseSteps = %v, %v", steps, err)
	}
	if Text(nil) != nil || Text([]byte("x")) != "x" {
		t.Error("Text")
	}
}

func TestHistoryCap(t *testing.T) {
	if HistoryCap != 20 {
		t.Fatalf("HistoryCap = %d: the relay's histories keep the latest 20 failures", HistoryCap)
	}
}
