package storetest

import (
	"bytes"
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
)

// Payloads of 1 MiB (Courier's default limit) go in, come out and are
// archived byte for byte, several in one write.
func testLargePayload[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	rng := rand.New(rand.NewPCG(1, 2))
	var msgs []courier.Message
	for i := range 3 {
		p := make([]byte, courier.DefaultMaxPayloadBytes)
		for j := range p {
			p[j] = byte(rng.Uint32())
		}
		msgs = append(msgs, courier.NewMessage("blobs", "big-"+string(rune('a'+i)), "Blob", p, courier.WithHeader("x-size", "1MiB")))
	}
	if err := db.writeTx(context.Background(), msgs, true); err != nil {
		t.Fatalf("write three 1 MiB messages: %v", err)
	}
	st := db.newStore(t, true)
	b := claim(t, st, "r", 3, time.Minute)
	if len(b.Records) != 3 {
		t.Fatalf("claimed %d rows, want 3", len(b.Records))
	}
	for i, r := range b.Records {
		sameMessage(t, r.Message, msgs[i])
	}
	complete(t, st, "r", b, store.Outcome{Published: seqs(b.Records)})
	var archived []byte
	db.queryRow(t, []any{&archived}, "SELECT payload FROM courier_outbox_published WHERE id = ?", b.Records[2].Seq)
	if !bytes.Equal(archived, msgs[2].Payload) {
		t.Fatalf("archived payload of %d bytes differs from the %d written", len(archived), len(msgs[2].Payload))
	}
}

// Keys are compared byte for byte: case, trailing spaces, normalisation
// forms and scripts all make different keys, which lease and back off
// independently, and every key comes back exactly as written.
func testUnicodeKeys[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	st := db.newStore(t, false)
	keys := []string{
		"κλειδί", "ключ", "鍵", "🔑", "🔑🔑", "key", "Key", "KEY", "k", "k ",
		"\u00e9", "e\u0301", "ß", "ss", strings.Repeat("€", 341) + "x", // 1024 bytes, the longest key allowed
	}
	var first, second []courier.Message
	for _, k := range keys {
		first = append(first, courier.NewMessage("events", k, "T", []byte("1 "+k)))
	}
	for _, k := range keys {
		second = append(second, courier.NewMessage("events", k, "T", []byte("2 "+k)))
	}
	db.write(t, first...)
	db.write(t, second...)

	// One claim of one row per key: each must be the next key's first row,
	// never blocked by a lease on a key that merely looks alike.
	var leases []store.Batch
	for i, k := range keys {
		b := claim(t, st, "owner-"+k, 1, time.Minute)
		if len(b.Records) != 1 || b.Records[0].Message.ID != first[i].ID {
			t.Fatalf("claim %d: got keys %q, want the first row of %q", i, keysOf(b.Records), k)
		}
		sameMessage(t, b.Records[0].Message, first[i])
		leases = append(leases, b)
	}
	if b := claim(t, st, "late", 100, time.Minute); len(b.Records) != 0 {
		t.Fatalf("every key is leased, yet claimed %q", keysOf(b.Records))
	}
	for i, b := range leases {
		complete(t, st, "owner-"+keys[i], b, store.Outcome{Published: seqs(b.Records)})
	}
	b := claim(t, st, "r", 100, time.Minute)
	if len(b.Records) != len(keys) {
		t.Fatalf("claimed %d second rows, want %d", len(b.Records), len(keys))
	}
	for i, r := range b.Records {
		sameMessage(t, r.Message, second[i])
	}

	// "key" backs off; "Key", "KEY" and the rest do not.
	complete(t, st, "r", b, store.Outcome{Retry: []store.Failure{{Seq: b.Records[5].Seq, Error: "x", Delay: time.Hour, Counted: true}}})
	c := claim(t, st, "r", 100, time.Minute)
	if len(c.Records) != len(keys)-1 {
		t.Fatalf("with one key backing off claimed %d rows, want %d", len(c.Records), len(keys)-1)
	}
	for _, r := range c.Records {
		if r.Message.Key == "key" {
			t.Fatal("claimed a row of the key backing off")
		}
	}
}
