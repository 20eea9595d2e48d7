package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier/store"
)

// groupInbox returns the inbox of db as a store.GroupInbox, and skips the
// test when it is not one (package inbox then marks a group one Mark at a
// time).
func groupInbox[TTx any](t *testing.T, db *testDB[TTx]) store.GroupInbox[TTx] {
	t.Helper()
	gi, ok := db.Inbox().(store.GroupInbox[TTx])
	if !ok {
		t.Skipf("the inbox (%T) does not mark groups", db.Inbox())
	}
	return gi
}

// sortedIDs returns n new message ids in ascending order, as MarkGroup
// takes them.
func sortedIDs(n int) []uuid.UUID {
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.New()
	}
	sortIDs(ids)
	return ids
}

// sortIDs sorts ids in ascending order of their bytes.
func sortIDs(ids []uuid.UUID) {
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
}

// markGroup marks ids for consumer in a transaction of gi and commits it
// (or rolls it back when commit is false); it returns MarkGroup's flags,
// after checking there is one for each id.
func markGroup[TTx any](t *testing.T, gi store.GroupInbox[TTx], consumer string, ids []uuid.UUID, commit bool) []bool {
	t.Helper()
	var fresh []bool
	err := inTx(gi.InTx, commit, func(tx TTx) (err error) {
		fresh, err = gi.MarkGroup(context.Background(), tx, consumer, ids)
		return err
	})
	must(t, err, "mark a group of %d messages for %q", len(ids), consumer)
	if len(fresh) != len(ids) {
		t.Fatalf("MarkGroup of %d messages returned %d flags", len(ids), len(fresh))
	}
	return fresh
}

// MarkGroup returns, in the order of its ids, whether each marker is new:
// false for a message marked already (by Mark or a group), true for one
// whose marker was rolled back; a rolled-back group leaves no marker; the
// same ids are fresh for another consumer; an empty group marks nothing.
func testInboxMarkGroup[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	gi := groupInbox(t, db)
	ids := sortedIDs(8)
	want := []bool{true, false, true, true, false, true, false, true}
	for i, fresh := range want {
		if !fresh {
			mark(t, gi, "billing", ids[i], true)
		} else if i == 2 {
			mark(t, gi, "billing", ids[i], false)
		}
	}
	if got := markGroup(t, gi, "billing", ids, false); !slices.Equal(got, want) {
		t.Fatalf("MarkGroup of new and marked messages = %v, want %v", got, want)
	}
	if got := markGroup(t, gi, "billing", ids, true); !slices.Equal(got, want) {
		t.Fatalf("MarkGroup after a rolled-back group = %v, want %v: the rolled-back markers were kept", got, want)
	}
	if got := markGroup(t, gi, "billing", ids, true); slices.Contains(got, true) {
		t.Fatalf("MarkGroup of a committed group again = %v, want all false", got)
	}
	for i, id := range ids {
		if mark(t, gi, "billing", id, true) {
			t.Fatalf("message %d of a committed group: Mark finds its marker fresh", i)
		}
	}
	if got := markGroup(t, gi, "shipping", ids, true); slices.Contains(got, false) {
		t.Fatalf("MarkGroup for another consumer = %v, want all true", got)
	}
	if got := markGroup(t, gi, "billing", nil, true); len(got) != 0 {
		t.Fatalf("MarkGroup of no messages = %v, want none", got)
	}
}

// MarkGroup deletes the failures recorded for each message of the group,
// new or duplicate, and none of another message's or consumer's; when its
// transaction rolls back they stay.
func testInboxMarkGroupClearsFailures[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	gi := groupInbox(t, db)
	ctx, cs := context.Background(), db.ConsumerStore()
	ids := sortedIDs(3) // ids[0] new, ids[1] marked already, ids[2] without failures
	other := uuid.New()
	mark(t, gi, "billing", ids[1], true)
	at := time.Now().UTC().Truncate(time.Microsecond).Add(-time.Hour)
	for _, f := range []struct {
		consumer string
		id       uuid.UUID
	}{{"billing", ids[0]}, {"billing", ids[0]}, {"billing", ids[1]}, {"billing", other}, {"shipping", ids[0]}} {
		_, err := cs.RecordFailure(ctx, f.consumer, f.id, store.Attempt{At: at, Error: "failed"})
		must(t, err, "record failure of %s for %q", f.id, f.consumer)
	}
	failing := func(what string, want map[string]int64) {
		t.Helper()
		st, err := db.Operations().Status(ctx)
		must(t, err, "status")
		got := map[string]int64{}
		for _, c := range st.Consumers {
			if c.FailingMessages > 0 {
				got[c.Consumer] = c.FailingMessages
			}
		}
		if !maps.Equal(got, want) {
			t.Fatalf("%s: failing messages by consumer %v, want %v", what, got, want)
		}
	}
	failing("before the group", map[string]int64{"billing": 3, "shipping": 1})
	markGroup(t, gi, "billing", ids, false)
	failing("after a rolled-back group", map[string]int64{"billing": 3, "shipping": 1})
	markGroup(t, gi, "billing", ids, true)
	failing("after the group committed", map[string]int64{"billing": 1, "shipping": 1})
}

// A group one of whose messages a concurrent transaction marked, not yet
// committed, waits for it: that message is a duplicate once it commits,
// and fresh when it rolls back; the others are fresh either way.
func testInboxMarkGroupWaits[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	gi := groupInbox(t, db)
	ctx := context.Background()
	for _, commit := range []bool{true, false} {
		ids := sortedIDs(5)
		held := ids[2]
		marked, finish := make(chan error, 1), make(chan struct{})
		first := make(chan error, 1)
		go func() {
			first <- gi.InTx(ctx, func(tx TTx) error {
				_, err := gi.Mark(ctx, tx, "c", held)
				marked <- err
				<-finish
				if err == nil && !commit {
					return errRollback
				}
				return err
			})
		}()
		must(t, <-marked, "mark %s", held)
		type result struct {
			fresh []bool
			err   error
		}
		group := make(chan result, 1)
		go func() {
			var r result
			r.err = gi.InTx(ctx, func(tx TTx) (err error) {
				r.fresh, err = gi.MarkGroup(ctx, tx, "c", ids)
				return err
			})
			group <- r
		}()
		select {
		case r := <-group:
			close(finish)
			t.Fatalf("a group returned (%v, %v) while a transaction that marked one of its messages was open; it must wait", r.fresh, r.err)
		case <-time.After(300 * time.Millisecond):
		}
		close(finish)
		if err := <-first; err != nil && !(errors.Is(err, errRollback) && !commit) {
			t.Fatalf("first delivery: %v", err)
		}
		r := <-group
		must(t, r.err, "group")
		want := []bool{true, true, !commit, true, true}
		if !slices.Equal(r.fresh, want) {
			t.Fatalf("after the transaction holding message 2 %s, the group's flags are %v, want %v",
				map[bool]string{true: "committed", false: "rolled back"}[commit], r.fresh, want)
		}
	}
}

// Concurrent groups that share messages, some marked already, neither
// deadlock nor fail: of all the groups that hold a message, exactly one
// finds its marker fresh.
func testInboxMarkGroupsShare[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	gi := groupInbox(t, db)
	ctx := context.Background()
	pool := sortedIDs(60)
	for _, id := range pool[:10] {
		mark(t, gi, "c", id, true)
	}
	const groups, size = 8, 30
	rng := rand.New(rand.NewPCG(1, 2))
	members := make([][]uuid.UUID, groups)
	for g := range members {
		for _, i := range rng.Perm(len(pool))[:size] {
			members[g] = append(members[g], pool[i])
		}
		sortIDs(members[g])
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		fresh = map[uuid.UUID]int{}
		errs  []error
	)
	for g := range members {
		wg.Go(func() {
			var flags []bool
			err := gi.InTx(ctx, func(tx TTx) (err error) {
				flags, err = gi.MarkGroup(ctx, tx, "c", members[g])
				return err
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("group %d: %w", g, err))
				return
			}
			for i, f := range flags {
				if f {
					fresh[members[g][i]]++
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent groups sharing messages: %v", err)
	}
	held := map[uuid.UUID]bool{}
	for _, m := range members {
		for _, id := range m {
			held[id] = true
		}
	}
	for i, id := range pool {
		want := 0
		if i >= 10 && held[id] {
			want = 1
		}
		if fresh[id] != want {
			t.Fatalf("message %d (marked before: %v, in a group: %v) was fresh in %d groups, want %d", i, i < 10, held[id], fresh[id], want)
		}
	}
}

// A large group is marked whole, its flags in order.
func testInboxMarkGroupLarge[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	gi := groupInbox(t, db)
	ids := sortedIDs(2500)
	want := make([]bool, len(ids))
	for i := range want {
		want[i] = i%97 != 0
	}
	var marked []uuid.UUID
	for i, id := range ids {
		if !want[i] {
			marked = append(marked, id)
		}
	}
	markGroup(t, gi, "c", marked, true)
	if got := markGroup(t, gi, "c", ids, true); !slices.Equal(got, want) {
		t.Fatalf("MarkGroup of %d messages, %d marked already: flags differ from the expected ones", len(ids), len(marked))
	}
}
