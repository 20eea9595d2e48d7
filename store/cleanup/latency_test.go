package cleanup_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/cleanup"
	"github.com/courier-go/courier/store/memstore"
	"github.com/courier-go/courier/store/sqlite"
)

// Latency samples older than their retention go, in batches, and the
// newer ones stay (on SQLite: memstore keeps no samples).
func TestLatencyRetention(t *testing.T) {
	ctx := context.Background()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "courier.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	clock := memstore.NewClock()
	d := sqlite.NewDriver(db).WithClock(clock.Now)
	if _, err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	record := func(n int) {
		t.Helper()
		samples := make([]store.LatencySample, n)
		for i := range samples {
			samples[i] = store.LatencySample{Consumer: "billing", Topic: "orders", Period: 10 * time.Second, Messages: 1, Buckets: []int64{1}}
		}
		if err := d.Delivery().RecordLatency(ctx, samples); err != nil {
			t.Fatal(err)
		}
	}
	const week = 7 * 24 * time.Hour
	record(5)
	clock.Advance(time.Hour)
	record(2)
	clock.Advance(week - time.Hour + time.Second) // the first 5 are a week and a second old
	c := &cleanup.Cleaner{Ops: d.Operations(), Keep: map[store.Table]time.Duration{store.TableLatency: week},
		Batch: 2, Pause: -1, Clock: clock.Now, Log: slog.New(slog.DiscardHandler)}
	r, err := c.RunOnce(ctx)
	if err != nil || r.Deleted[store.TableLatency] != 5 {
		t.Fatalf("pass a week later: %+v, %v; want the 5 oldest samples deleted", r, err)
	}
	left, err := d.Delivery().Latency(ctx, time.Time{}, 10)
	if err != nil || len(left) != 2 {
		t.Fatalf("samples left: %d, %v; want the 2 recorded an hour later", len(left), err)
	}
}
