package columns

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
)

// The statements' texts as they were written out before they were computed
// from Message: they begin so, and go on with the columns added since.
func TestListsFromMessage(t *testing.T) {
	added := len(Message) - 9
	for _, c := range []struct{ got, want string }{
		{Names, "message_id, topic, ordering_key, type, version, content_type, payload, headers, occurred_at"},
		{Marks, "?, ?, ?, ?, ?, ?, ?, ?, ?"},
		{Params(1), "$1, $2, $3, $4, $5, $6, $7, $8, $9"},
		{Unnest(1), "$1::uuid[], $2::text[], $3::text[], $4::text[], $5::int[], $6::text[], $7::bytea[], $8::jsonb[], $9::timestamptz[]"},
		{Unnest(3), "$3::uuid[], $4::text[], $5::text[], $6::text[], $7::int[], $8::text[], $9::bytea[], $10::jsonb[], $11::timestamptz[]"},
		{List("o."), "o.message_id, o.topic, o.ordering_key, o.type, o.version, o.content_type, o.payload, o.headers, o.occurred_at"},
		{ListWith("s.", map[string]string{"payload": "coalesce(s.payload, '')", "occurred_at": "s.due_at"}),
			"s.message_id, s.topic, s.ordering_key, s.type, s.version, s.content_type, coalesce(s.payload, ''), s.headers, s.due_at"},
	} {
		if !strings.HasPrefix(c.got, c.want) || strings.Count(c.got, ", ") != strings.Count(c.want, ", ")+added {
			t.Errorf("got\n%s\nwant\n%s and %d more", c.got, c.want, added)
		}
	}
	if Param(1, 1) != "$"+strconv.Itoa(10+added) || Param(1, 4) != "$"+strconv.Itoa(13+added) {
		t.Errorf("Param(1, 1), Param(1, 4) = %s, %s", Param(1, 1), Param(1, 4))
	}
}

func TestCheck(t *testing.T) {
	if err := check(Message); err != nil {
		t.Fatal(err)
	}
	bad := []Column{{"topic", "Topic", Int, func(m *courier.Message) any { return &m.Topic }}}
	if err := check(bad); err == nil || !strings.Contains(err.Error(), "column topic (courier.Message.Topic)") {
		t.Errorf("check of a column whose Kind is not its field's = %v", err)
	}
	twice := []Column{Message[1], Message[1]}
	if err := check(twice); err == nil || !strings.Contains(err.Error(), "listed twice") {
		t.Errorf("check of a column listed twice = %v", err)
	}
}

func sample() courier.Message {
	return courier.Message{ID: uuid.MustParse("0192f3a4-0000-7000-8000-000000000001"), Topic: "t", Key: "k", Type: "x",
		Version: 2, ContentType: "c", Headers: map[string]string{"a": "b"},
		OccurredAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))}
}

func TestBind(t *testing.T) {
	m := sample()
	sqlArgs := AppendArgs(nil, &m, func(t time.Time) any { return t.UnixMicro() })
	want := []any{m.ID.String(), "t", "k", "x", 2, "c", []byte{}, `{"a":"b"}`, m.OccurredAt.UnixMicro()}
	if len(sqlArgs) != len(Message) || !reflect.DeepEqual(sqlArgs[:9], want) {
		t.Errorf("AppendArgs = %#v, want %#v", sqlArgs, want)
	}
	pgx := AppendPgx(nil, &m)
	want = []any{[16]byte(m.ID), "t", "k", "x", 2, "c", []byte{}, []byte(`{"a":"b"}`), m.OccurredAt}
	if len(pgx) != len(Message) || !reflect.DeepEqual(pgx[:9], want) {
		t.Errorf("AppendPgx = %#v, want %#v", pgx, want)
	}
	msgs := []courier.Message{m, {}}
	arrays := Arrays(2, func(i int) *courier.Message { return &msgs[i] })
	h := `{"a":"b"}`
	want = []any{[][16]byte{m.ID, {}}, []string{"t", ""}, []string{"k", ""}, []string{"x", ""}, []int32{2, 0},
		[]string{"c", ""}, [][]byte{{}, {}}, []*string{&h, nil}, []time.Time{m.OccurredAt, {}}}
	if len(arrays) != len(Message) || !reflect.DeepEqual(arrays[:9], want) {
		t.Errorf("Arrays = %#v, want %#v", arrays, want)
	}
}

func TestScan(t *testing.T) {
	var m courier.Message
	var timeDest *time.Time
	dests := AppendSQLDests(nil, &m, func(t *time.Time) any { timeDest = t; return t })
	if len(dests) != len(Message) || timeDest != &m.OccurredAt || dests[1] != &m.Topic {
		t.Fatalf("AppendSQLDests = %v", dests)
	}
	headers := dests[7].(interface{ Scan(any) error })
	text := []byte(`{"a":"b"}`)
	if err := headers.Scan(text); err != nil {
		t.Fatal(err)
	}
	copy(text, "xxxxxxxxx") // the driver's buffer, reused
	m.OccurredAt = time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	if err := DecodeSQL(&m, dests, "row", 7); err != nil || m.Headers["a"] != "b" || m.Payload == nil || m.OccurredAt.Location() != time.UTC {
		t.Errorf("DecodeSQL = %v: %+v", err, m)
	}
	if err := headers.Scan("{"); err != nil {
		t.Fatal(err)
	}
	if err := DecodeSQL(&m, dests, "row", 7); err == nil || !strings.HasPrefix(err.Error(), "headers of row 7: ") {
		t.Errorf("DecodeSQL of bad headers = %v", err)
	}
	if err := headers.Scan(7); err == nil || !strings.Contains(err.Error(), "headers") {
		t.Errorf("Scan of an int = %v", err)
	}
	if dests := AppendDests(nil, &m); dests[0] != &m.ID || dests[8] != &m.OccurredAt {
		t.Errorf("AppendDests = %v", dests)
	}
	if c, ok := ByName("ordering_key"); !ok || c.Field != "Key" {
		t.Errorf("ByName(ordering_key) = %+v, %v", c, ok)
	}
	if _, ok := ByName("id"); ok {
		t.Error("ByName(id) found a column")
	}
}

// Every column survives the log's encoding, in any order, and a cut
// encoding does not decode.
func TestLogColumns(t *testing.T) {
	m := sample()
	m.Payload = []byte("p")
	var b []byte
	for _, c := range Message {
		b = AppendLog(b, c, &m)
	}
	var got courier.Message
	rest := b
	for _, c := range Message {
		var ok bool
		if rest, ok = ReadLog(rest, c, &got); !ok {
			t.Fatalf("column %s does not decode", c.Name)
		}
	}
	if len(rest) != 0 || !reflect.DeepEqual(got.Headers, m.Headers) || !got.OccurredAt.Equal(m.OccurredAt) || string(got.Payload) != "p" ||
		got.ID != m.ID || got.Topic != m.Topic || got.Version != m.Version {
		t.Fatalf("decoded %+v, rest %x; want %+v", got, rest, m)
	}
	for cut := range len(b) - 1 {
		rest, ok := b[:cut], true
		for _, c := range Message {
			if rest, ok = ReadLog(rest, c, &got); !ok {
				break
			}
		}
		if ok {
			t.Fatalf("an encoding cut at byte %d of %d decodes", cut, len(b))
		}
	}
}
