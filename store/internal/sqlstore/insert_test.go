package sqlstore

import (
	"testing"

	"github.com/courier-go/courier"
)

// A chunk holds Rows messages at most and, beyond its first, Bytes of
// payloads and headers at most; without Bytes, Rows alone bound it.
func TestInserterChunks(t *testing.T) {
	msgs := make([]courier.Message, 7)
	for i := range msgs {
		msgs[i].Payload = make([]byte, 40)
	}
	msgs[3].Headers = map[string]string{"a": "bcd"} // 44 bytes
	for _, c := range []struct {
		rows, bytes int
		want        []int
	}{
		{3, 0, []int{3, 3, 1}},
		{5, 100, []int{2, 2, 2, 1}},
		{5, 10, []int{1, 1, 1, 1, 1, 1, 1}},
		{10, 1000, []int{7}},
	} {
		var got []int
		for chunk := range (Inserter{Rows: c.rows, Bytes: c.bytes}).chunks(msgs) {
			got = append(got, len(chunk))
		}
		if len(got) != len(c.want) {
			t.Fatalf("rows %d, bytes %d: chunks of %v, want %v", c.rows, c.bytes, got, c.want)
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Fatalf("rows %d, bytes %d: chunks of %v, want %v", c.rows, c.bytes, got, c.want)
			}
		}
	}
}
