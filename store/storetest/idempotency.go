package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"maps"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier/store"
)

// keyClaim is a claim of (scope, key) by a new owner.
func keyClaim(scope, key string, fingerprint []byte, lockFor, retain time.Duration) store.KeyClaim {
	return store.KeyClaim{Scope: scope, Key: key, Fingerprint: fingerprint, Owner: uuid.New(), LockFor: lockFor, Retain: retain}
}

func fingerprint(s string) []byte {
	sum := sha256.Sum256([]byte(s))
	return sum[:]
}

// claimKey claims c and fails the test on an error.
func claimKey[TTx any](t *testing.T, st store.Idempotency[TTx], c store.KeyClaim) (store.KeyRecord, bool) {
	t.Helper()
	rec, mine, err := st.Claim(context.Background(), c)
	if err != nil {
		t.Fatalf("claim (%q, %q): %v", c.Scope, c.Key, err)
	}
	if rec.Scope != c.Scope || rec.Key != c.Key {
		t.Fatalf("claim of (%q, %q) returned the record of (%q, %q)", c.Scope, c.Key, rec.Scope, rec.Key)
	}
	return rec, mine
}

// completeKey stores resp for owner in a transaction of st and commits it
// (or rolls it back when commit is false); it returns what Complete said.
func completeKey[TTx any](t *testing.T, st store.Idempotency[TTx], scope, key string, owner uuid.UUID, resp store.StoredResponse, commit bool) bool {
	t.Helper()
	ctx := context.Background()
	var ok bool
	err := st.InTx(ctx, func(tx TTx) error {
		var err error
		if ok, err = st.Complete(ctx, tx, scope, key, owner, resp); err != nil {
			return err
		}
		if !commit {
			return errRollback
		}
		return nil
	})
	if err != nil && !(errors.Is(err, errRollback) && !commit) {
		t.Fatalf("complete (%q, %q): %v", scope, key, err)
	}
	return ok
}

// A claim owns a fresh key and reports a claimed one as it stands; only the
// owner completes it, in its transaction, and the stored response comes back
// to later claims byte for byte; Release frees only an owner's in-flight
// key. Scopes and keys are compared exactly.
func testIdempotencyClaim[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	ctx := context.Background()
	st := db.Idempotency()
	key := "order-"
	fp := fingerprint("POST /orders {\"item\":\"coffee\"}")
	c := keyClaim("alice", key, fp, time.Minute, time.Hour)
	claimed := time.Now()
	rec, mine := claimKey(t, st, c)
	if !mine || rec.Done || !bytes.Equal(rec.Fingerprint, fp) {
		t.Fatalf("claim of a fresh key: mine %v, %+v; want it owned, in flight, with its fingerprint", mine, rec)
	}
	near(t, "locked_until", rec.LockedUntil, claimed.Add(time.Minute), clockMargin)
	if again, mine := claimKey(t, st, keyClaim("alice", key, fp, time.Minute, time.Hour)); mine || again.Done ||
		!bytes.Equal(again.Fingerprint, fp) || !again.LockedUntil.Equal(rec.LockedUntil) {
		t.Fatalf("second claim of an in-flight key: mine %v, %+v; want the first one's record", mine, again)
	}
	for _, other := range []struct{ scope, key string }{{"bob", key}, {"alice", key + " "}, {"alice", "Order-"}, {"álice", key}} {
		if _, mine := claimKey(t, st, keyClaim(other.scope, other.key, fp, time.Minute, time.Hour)); !mine {
			t.Fatalf("(%q, %q) is another key than (%q, %q), yet its claim found a record", other.scope, other.key, "alice", key)
		}
	}

	resp := store.StoredResponse{
		Status:  http.StatusCreated,
		Headers: http.Header{"Content-Type": {"application/json"}, "Link": {"</a>; rel=a", "</b>; rel=b"}},
		Body:    []byte(`{"id":1,"item":"coffee","note":"ünïcödé"}` + "\x00\xff"),
	}
	if completeKey(t, st, "alice", key, uuid.New(), resp, true) {
		t.Fatal("Complete by another owner succeeded")
	}
	if !completeKey(t, st, "alice", key, c.Owner, resp, false) {
		t.Fatal("Complete by the owner failed")
	}
	if rec, _ := claimKey(t, st, keyClaim("alice", key, fp, time.Minute, time.Hour)); rec.Done {
		t.Fatal("a rolled-back Complete left the key done")
	}
	if !panics(func() {
		_ = st.InTx(ctx, func(tx TTx) error {
			if _, err := st.Complete(ctx, tx, "alice", key, c.Owner, resp); err != nil {
				return err
			}
			panic("handler panics")
		})
	}) {
		t.Fatal("InTx swallowed its function's panic")
	}
	if !completeKey(t, st, "alice", key, c.Owner, resp, true) {
		t.Fatal("Complete by the owner failed after a transaction that panicked")
	}
	if completeKey(t, st, "alice", key, c.Owner, resp, true) {
		t.Fatal("a second Complete of a done key succeeded")
	}
	rec, mine = claimKey(t, st, keyClaim("alice", key, fp, time.Minute, time.Hour))
	if mine || !rec.Done || rec.Response.Status != resp.Status || !bytes.Equal(rec.Response.Body, resp.Body) ||
		!maps.EqualFunc(rec.Response.Headers, resp.Headers, slices.Equal[[]string]) || !bytes.Equal(rec.Fingerprint, fp) {
		t.Fatalf("claim of a done key: mine %v, %+v; want the stored response %+v", mine, rec, resp)
	}
	// A different request with the key gets the record; judging the
	// mismatch is the caller's business.
	if rec, mine := claimKey(t, st, keyClaim("alice", key, fingerprint("POST /orders {}"), time.Minute, time.Hour)); mine || !rec.Done || !bytes.Equal(rec.Fingerprint, fp) {
		t.Fatalf("claim with another fingerprint: mine %v, %+v; want the stored record untouched", mine, rec)
	}
	if err := st.Release(ctx, "alice", key, c.Owner); err != nil {
		t.Fatalf("release: %v", err)
	}
	if rec, _ := claimKey(t, st, keyClaim("alice", key, fp, time.Minute, time.Hour)); !rec.Done {
		t.Fatal("Release deleted a done key")
	}

	// Release.
	r := keyClaim("alice", "release-", fp, time.Minute, time.Hour)
	claimKey(t, st, r)
	if err := st.Release(ctx, r.Scope, r.Key, uuid.New()); err != nil {
		t.Fatalf("release by another owner: %v", err)
	}
	if _, mine := claimKey(t, st, keyClaim(r.Scope, r.Key, fp, time.Minute, time.Hour)); mine {
		t.Fatal("Release by another owner freed the key")
	}
	if err := st.Release(ctx, r.Scope, r.Key, r.Owner); err != nil {
		t.Fatalf("release: %v", err)
	}
	if _, mine := claimKey(t, st, keyClaim(r.Scope, r.Key, fp, time.Minute, time.Hour)); !mine {
		t.Fatal("a released key cannot be claimed again")
	}

	// An empty response.
	e := keyClaim("alice", "empty-", fp, time.Minute, time.Hour)
	claimKey(t, st, e)
	if !completeKey(t, st, e.Scope, e.Key, e.Owner, store.StoredResponse{Status: http.StatusNoContent}, true) {
		t.Fatal("Complete with an empty response failed")
	}
	if rec, _ := claimKey(t, st, keyClaim(e.Scope, e.Key, fp, time.Minute, time.Hour)); !rec.Done ||
		rec.Response.Status != http.StatusNoContent || len(rec.Response.Body) != 0 || len(rec.Response.Headers) != 0 {
		t.Fatalf("empty response stored as %+v", rec)
	}
}

// An in-flight key whose lock expired goes to the next claim of the same
// request, and the old owner can no longer complete it; a record past its
// expiry counts as absent; DeleteExpired removes expired records, limit at
// a time.
func testIdempotencyExpiry[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	ctx := context.Background()
	st := db.Idempotency()
	fp := fingerprint("POST /orders")
	key := "lock-"
	// (That a key is not taken over within its lock is tested with a
	// longer lock in testIdempotencyClaim; this one only has to end.)
	first := keyClaim("s", key, fp, 200*time.Millisecond, time.Hour)
	claimKey(t, st, first)
	expired := keyClaim("s", "expired-", fp, 100*time.Millisecond, 200*time.Millisecond)
	claimKey(t, st, expired)
	if !completeKey(t, st, "s", expired.Key, expired.Owner, store.StoredResponse{Status: 200, Body: []byte("old")}, true) {
		t.Fatal("complete")
	}
	for i := range 3 {
		claimKey(t, st, keyClaim("s", "short-"+string(rune('a'+i)), fp, 100*time.Millisecond, 100*time.Millisecond))
	}
	time.Sleep(300 * time.Millisecond)

	if rec, mine := claimKey(t, st, keyClaim("s", key, fingerprint("POST /other"), time.Minute, time.Hour)); mine || !bytes.Equal(rec.Fingerprint, fp) {
		t.Fatalf("a different request took over an expired lock: mine %v, %+v", mine, rec)
	}
	second := keyClaim("s", key, fp, time.Minute, time.Hour)
	if rec, mine := claimKey(t, st, second); !mine || rec.Done || time.Until(rec.LockedUntil) < 30*time.Second {
		t.Fatalf("the same request did not take over an expired lock: mine %v, %+v", mine, rec)
	}
	if completeKey(t, st, "s", key, first.Owner, store.StoredResponse{Status: 200}, true) {
		t.Fatal("the owner whose lock was taken over completed the key")
	}
	if !completeKey(t, st, "s", key, second.Owner, store.StoredResponse{Status: 200}, true) {
		t.Fatal("the new owner could not complete the key")
	}

	// Past its expiry, a done record is replaced, whatever the request.
	rec, mine := claimKey(t, st, keyClaim("s", expired.Key, fingerprint("POST /new"), time.Minute, time.Hour))
	if !mine || rec.Done || !bytes.Equal(rec.Fingerprint, fingerprint("POST /new")) || len(rec.Response.Body) != 0 {
		t.Fatalf("claim of an expired key: mine %v, %+v; want a fresh record", mine, rec)
	}

	var deleted []int64
	for range 3 {
		n, err := st.DeleteExpired(ctx, 2)
		if err != nil {
			t.Fatalf("delete expired: %v", err)
		}
		deleted = append(deleted, n)
	}
	if !slices.Equal(deleted, []int64{2, 1, 0}) {
		t.Fatalf("DeleteExpired(limit 2) of 3 expired keys deleted %v, want [2 1 0]", deleted)
	}
	if _, mine := claimKey(t, st, keyClaim("s", key, fp, time.Minute, time.Hour)); mine {
		t.Fatal("DeleteExpired deleted a live key")
	}
}

// 50 concurrent claims of one key make exactly one owner, whether the key is
// fresh, its lock expired, or its record expired; the others see the
// winner's record.
func testIdempotencyConcurrent[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	st := db.Idempotency()
	fp := fingerprint("POST /pay")
	key := "pay-"
	// A key whose lock, and a record that, will have expired by the
	// second and third rounds.
	locked := keyClaim("s", "locked-", fp, 200*time.Millisecond, time.Hour)
	claimKey(t, st, locked)
	old := keyClaim("s", "old-", fingerprint("POST /old"), time.Minute, 200*time.Millisecond)
	claimKey(t, st, old)
	completeKey(t, st, old.Scope, old.Key, old.Owner, store.StoredResponse{Status: 200}, true)
	expired := time.Now().Add(300 * time.Millisecond)

	round := func(what string, key string) store.KeyClaim {
		t.Helper()
		claims := make([]store.KeyClaim, 50)
		mine := make([]bool, len(claims))
		recs := make([]store.KeyRecord, len(claims))
		errs := make([]error, len(claims))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range claims {
			claims[i] = keyClaim("s", key, fp, time.Minute, time.Hour)
			wg.Go(func() {
				<-start
				recs[i], mine[i], errs[i] = st.Claim(context.Background(), claims[i])
			})
		}
		close(start)
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("%s: concurrent claims failed: %v", what, err)
		}
		winner := slices.Index(mine, true)
		if n := len(slices.DeleteFunc(slices.Clone(mine), func(m bool) bool { return !m })); n != 1 {
			t.Fatalf("%s: 50 concurrent claims made %d owners, want exactly 1", what, n)
		}
		for i, rec := range recs {
			if rec.Done || !bytes.Equal(rec.Fingerprint, fp) || (!mine[i] && !rec.LockedUntil.Equal(recs[winner].LockedUntil)) {
				t.Fatalf("%s: claim %d saw %+v, not the winner's record %+v", what, i, rec, recs[winner])
			}
		}
		for i, c := range claims[:4] {
			if i != winner && completeKey(t, st, c.Scope, c.Key, c.Owner, store.StoredResponse{Status: 200}, false) {
				t.Fatalf("%s: a losing claim could complete the key", what)
			}
		}
		return claims[winner]
	}
	start := time.Now()
	round("fresh key", key)
	t.Logf("50 concurrent claims of a fresh key took %s", time.Since(start).Round(time.Millisecond))
	time.Sleep(time.Until(expired))
	winner := round("expired lock", locked.Key)
	round("expired record", old.Key)
	if !completeKey(t, st, winner.Scope, winner.Key, winner.Owner, store.StoredResponse{Status: 200}, true) {
		t.Fatal("the winner of the takeover could not complete the key")
	}
}
