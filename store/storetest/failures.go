package storetest

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier/store"
)

// Failed handler runs are recorded per consumer and message, each in its
// own transaction, and read back whole, oldest first, with their times to
// the microsecond; ClearFailures forgets a message's failures and
// DeleteFailures removes old ones, at most limit at a time.
func testInboxFailures[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	ctx := context.Background()
	cs := db.ConsumerStore()
	record := func(consumer string, id uuid.UUID, at time.Time, msg string) []store.Attempt {
		t.Helper()
		hist, err := cs.RecordFailure(ctx, consumer, id, store.Attempt{At: at, Error: msg})
		if err != nil {
			t.Fatalf("record failure of %s for %q: %v", id, consumer, err)
		}
		return hist
	}
	same := func(what string, got, want []store.Attempt) {
		t.Helper()
		if !slices.EqualFunc(got, want, func(a, b store.Attempt) bool { return a.At.Equal(b.At) && a.Error == b.Error }) {
			t.Fatalf("%s: failures %v, want %v", what, got, want)
		}
	}

	id, other := uuid.New(), uuid.New()
	start := time.Now().UTC().Truncate(time.Microsecond).Add(-time.Hour)
	// A panic's stack runs to kilobytes; it is kept whole.
	stack := "handler panicked: boom\n\n" + strings.Repeat("goroutine 7 [running]:\nmain.handler(…)\n\t/app/handler.go:42 +0x1d\n", 400)
	var want []store.Attempt
	for i, msg := range []string{"first", "second: ünïcødé", stack} {
		at := start.Add(time.Duration(i) * time.Minute)
		want = append(want, store.Attempt{At: at, Error: msg})
		same("after failure "+string(rune('1'+i)), record("billing", id, at, msg), want)
	}
	// Counted per consumer (names compared exactly) and per message.
	for _, c := range []string{"shipping", "Billing", "billing ", "账单"} {
		same("consumer "+c, record(c, id, start, "x"), []store.Attempt{{At: start, Error: "x"}})
	}
	same("another message", record("billing", other, start, "y"), []store.Attempt{{At: start, Error: "y"}})

	if err := cs.ClearFailures(ctx, "billing", id); err != nil {
		t.Fatalf("clear failures: %v", err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	same("after ClearFailures", record("billing", id, now, "again"), []store.Attempt{{At: now, Error: "again"}})
	same("another message after ClearFailures of the first",
		record("billing", other, now, "z"), []store.Attempt{{At: start, Error: "y"}, {At: now, Error: "z"}})

	// Old failures: 4 consumers' of id and other's first; recent: id's and other's second.
	var deleted []int64
	for range 4 {
		n, err := cs.DeleteFailures(ctx, now.Add(-time.Minute), 2)
		if err != nil {
			t.Fatalf("delete failures: %v", err)
		}
		deleted = append(deleted, n)
	}
	if !slices.Equal(deleted, []int64{2, 2, 1, 0}) {
		t.Fatalf("DeleteFailures(limit 2) of 5 old failures deleted %v, want [2 2 1 0]", deleted)
	}
	same("recent failures after DeleteFailures", record("billing", other, now, "w"),
		[]store.Attempt{{At: now, Error: "z"}, {At: now, Error: "w"}})
}
