package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/courier-go/courier/store"
)

// A replay run is recorded running with its selection, its progress and
// its end, at the store's clock, and listed newest first, a page at a
// time; a run that does not exist, a state that is not an end and counts
// that cannot be are refused.
func testReplayRuns[TTx any](t *testing.T, h opener[TTx]) {
	ctx := context.Background()
	db := open(t, h, true)
	t0 := db.stopClock()
	runs := db.ReplayRuns()
	if got, err := runs.ListRuns(ctx, 0, 10); err != nil || len(got) != 0 {
		t.Fatalf("no runs yet: %v %v", got, err)
	}
	first, err := runs.StartRun(ctx, store.ReplayRun{Side: "relay", Selection: "--group g1 --canary 2", Total: 5, Note: "canary"})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	db.clock.Set(t0.Add(time.Second))
	second, err := runs.StartRun(ctx, store.ReplayRun{Side: "consumer", Selection: "consumer:7", Total: 1})
	if err != nil || second <= first {
		t.Fatalf("second start: id %d after %d, %v", second, first, err)
	}
	db.clock.Set(t0.Add(2 * time.Second))
	if err := runs.UpdateRun(ctx, first, 3, 1, "3 of 5 replayed"); err != nil {
		t.Fatalf("update: %v", err)
	}
	// The same counts again: found, though nothing but the time changes.
	if err := runs.UpdateRun(ctx, first, 3, 1, "3 of 5 replayed"); err != nil {
		t.Fatalf("update unchanged: %v", err)
	}
	got, err := runs.ListRuns(ctx, 0, 10)
	if err != nil || len(got) != 2 || got[0].ID != second || got[1].ID != first {
		t.Fatalf("list: %+v %v", got, err)
	}
	r := got[1]
	want := store.ReplayRun{ID: first, Side: "relay", Selection: "--group g1 --canary 2", State: store.RunRunning, Total: 5, Replayed: 3, Failed: 1, Left: 2,
		Note: "3 of 5 replayed", StartedAt: t0, UpdatedAt: t0.Add(2 * time.Second)}
	if r.FinishedAt != nil || !r.StartedAt.Equal(want.StartedAt) || !r.UpdatedAt.Equal(want.UpdatedAt) {
		t.Fatalf("running run's times: %+v, want started %s updated %s, not finished", r, t0, want.UpdatedAt)
	}
	r.StartedAt, r.UpdatedAt = want.StartedAt, want.UpdatedAt
	if r != want {
		t.Fatalf("running run:\n got %+v\nwant %+v", r, want)
	}
	db.clock.Set(t0.Add(3 * time.Second))
	if err := runs.FinishRun(ctx, first, store.RunStopped, 3, 2, "stopped: a replay failed again; 2 left"); err != nil {
		t.Fatalf("finish: %v", err)
	}
	got, err = runs.ListRuns(ctx, second, 10)
	if err != nil || len(got) != 1 || got[0].ID != first {
		t.Fatalf("the page before %d: %+v %v", second, got, err)
	}
	if r := got[0]; r.State != store.RunStopped || r.Failed != 2 || r.Left != 2 || r.FinishedAt == nil || !r.FinishedAt.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("finished run: %+v", r)
	}
	if got, err := runs.ListRuns(ctx, 0, 1); err != nil || len(got) != 1 || got[0].ID != second {
		t.Fatalf("limit 1: %+v %v", got, err)
	}

	if err := runs.UpdateRun(ctx, second+100, 0, 0, ""); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update of a run that does not exist: %v, want ErrNotFound", err)
	}
	if err := runs.FinishRun(ctx, second+100, store.RunDone, 0, 0, ""); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("finish of a run that does not exist: %v, want ErrNotFound", err)
	}
	if err := runs.FinishRun(ctx, second, store.RunRunning, 0, 0, ""); err == nil {
		t.Fatal("finish in state running: no error")
	}
	if err := runs.UpdateRun(ctx, second, 1, 2, ""); err == nil {
		t.Fatal("more failed than replayed: no error")
	}
	if err := runs.UpdateRun(ctx, second, -1, 0, ""); err == nil {
		t.Fatal("negative count: no error")
	}
	if _, err := runs.StartRun(ctx, store.ReplayRun{Side: "relay", Total: -1}); err == nil {
		t.Fatal("negative total: no error")
	}
	for _, limit := range []int{0, store.MaxListLimit + 1} {
		if _, err := runs.ListRuns(ctx, 0, limit); err == nil {
			t.Fatalf("limit %d: no error", limit)
		}
	}
	if _, err := runs.ListRuns(ctx, 0, store.MaxListLimit); err != nil {
		t.Fatalf("limit %d: %v", store.MaxListLimit, err)
	}
}
