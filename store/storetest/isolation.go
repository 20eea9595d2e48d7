package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
)

// A key held by a failed row with a deep backlog behind it, or by a lease
// over the first run of a bulk write, does not keep other keys' rows from
// being claimed: the claim skips the held key's rows, however many fill what
// used to be its window.
func testHeldKeyBacklog[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	st := db.newStore(t, false)
	db.write(t, courier.NewMessage("events", "poisoned", "Poison", []byte("poison")))
	p := claim(t, st, "r", 10, time.Minute)
	if len(p.Records) != 1 {
		t.Fatalf("claimed %d rows, want the poison message", len(p.Records))
	}
	complete(t, st, "r", p, store.Outcome{Retry: []store.Failure{{Seq: p.Records[0].Seq, Error: "rejected", Delay: time.Hour, Counted: true}}})
	backlog := make([]courier.Message, 5000)
	for i := range backlog {
		backlog[i] = courier.NewMessage("events", "poisoned", "Numbered", fmt.Appendf(nil, "%d", i))
	}
	db.write(t, backlog...)
	other := courier.NewMessage("events", "other", "Other", []byte("other"))
	db.write(t, other)
	b := claim(t, st, "r", 10, time.Minute)
	if len(b.Records) != 1 || b.Records[0].Message.ID != other.ID {
		t.Fatalf("behind a held key's 5,000 rows claimed keys %v, want just the other key's row", keysOf(b.Records))
	}
	complete(t, st, "r", b, store.Outcome{Published: seqs(b.Records)})

	// A bulk write on one key: while its first run is leased, the rest of it
	// does not hide another key's row.
	bulk := numbered(15000, 1, "bulk")
	db.write(t, bulk...)
	late := courier.NewMessage("events", "late", "Other", []byte("late"))
	db.write(t, late)
	run := claim(t, st, "a", 1000, time.Minute)
	if len(run.Records) != 1000 || run.Records[0].Message.Key != "bulk0" {
		t.Fatalf("first claim: %d rows of %v, want 1,000 of bulk0", len(run.Records), keysOf(run.Records))
	}
	next := claim(t, st, "b", 1000, time.Minute)
	if len(next.Records) != 1 || next.Records[0].Message.ID != late.ID {
		t.Fatalf("while bulk0 is leased claimed keys %v, want just the other key's row", keysOf(next.Records))
	}
}

// raceRounds is how many times each race below is set up.
const raceRounds = 40

// A row's retry that comes due while a claim is running either counts as
// due for the whole claim or as pending for the whole claim: the key's
// later rows are never claimed ahead of it.
func testRetryDueDuringClaim[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	st := db.newStore(t, false)
	slowClaims(t, db, st)
	for round := range raceRounds {
		key := fmt.Sprintf("due-%d", round)
		first, second := courier.NewMessage("events", key, "T", []byte("1")), courier.NewMessage("events", key, "T", []byte("2"))
		db.write(t, first, second)
		b := claim(t, st, "r", 1, time.Minute)
		if len(b.Records) != 1 || b.Records[0].Message.ID != first.ID {
			t.Fatalf("round %d: claimed %v, want the key's first row", round, keysOf(b.Records))
		}
		delay := time.Duration(rand.IntN(15)) * time.Millisecond
		complete(t, st, "r", b, store.Outcome{Retry: []store.Failure{{Seq: b.Records[0].Seq, Error: "once", Delay: delay, Counted: true}}})
		claimFirstAgain(t, st, "r", first, fmt.Sprintf("round %d: the retry came due during a claim and", round))
	}
}

// A Complete that releases a key's rows while another relay's claim is
// running: the claim either sees the key as held or claims it from its
// released first row, never from the row after it.
func testReleaseDuringClaim[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	st := db.newStore(t, false)
	slowClaims(t, db, st)
	for round := range raceRounds {
		key := fmt.Sprintf("released-%d", round)
		first, second := courier.NewMessage("events", key, "T", []byte("1")), courier.NewMessage("events", key, "T", []byte("2"))
		db.write(t, first)
		a := claim(t, st, "a", 1, time.Minute)
		if len(a.Records) != 1 || a.Records[0].Message.ID != first.ID {
			t.Fatalf("round %d: claimed %v, want the key's first row", round, keysOf(a.Records))
		}
		db.write(t, second)
		var wg sync.WaitGroup
		wg.Go(func() {
			time.Sleep(time.Duration(rand.IntN(4000)) * time.Microsecond)
			if err := st.Complete(context.Background(), "a", a.Lease, store.Outcome{}); err != nil { // releases the first row
				t.Errorf("round %d: complete: %v", round, err)
			}
		})
		claimFirstAgain(t, st, "b", first, fmt.Sprintf("round %d: a release during a claim", round))
		wg.Wait()
	}
}

// claimFirstAgain claims until rows come back, which must start with first,
// and publishes them. race says what happened before, for the failure.
func claimFirstAgain(t *testing.T, st store.RelayStore, owner string, first courier.Message, race string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		b := claim(t, st, owner, 100, time.Minute)
		if len(b.Records) == 0 {
			continue
		}
		if b.Records[0].Message.ID != first.ID {
			t.Fatalf("%s let the key's second row be claimed without its first (claimed %d rows)", race, len(b.Records))
		}
		complete(t, st, owner, b, store.Outcome{Published: seqs(b.Records)})
		for { // the rows behind a retried row follow it
			b := claim(t, st, owner, 100, time.Minute)
			if len(b.Records) == 0 {
				return
			}
			complete(t, st, owner, b, store.Outcome{Published: seqs(b.Records)})
		}
	}
	t.Fatalf("%s: the key's first row never came back", race)
}

// slowClaims makes every claim of st take a while, so that the races above
// have a window to land in: 5,000 rows of other keys held by a long lease,
// which each claim's scan has to look past.
func slowClaims[TTx any](t *testing.T, db *testDB[TTx], st store.RelayStore) {
	t.Helper()
	db.write(t, numbered(5000, 50, "filler")...)
	if b := claim(t, st, "filler", 5000, time.Hour); len(b.Records) != 5000 {
		t.Fatalf("filler lease holds %d rows, want 5,000", len(b.Records))
	}
}
