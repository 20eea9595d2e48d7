package storetest

import (
	"context"
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier/store"
)

// An audit watch is saved whole and replaced whole under its name, at the
// store's clock; its findings and times come back as saved (no time, no
// findings: none), the watches are listed by name byte for byte, a watch
// is deleted once, and a watch without a name, with a negative count or
// with findings that are not JSON is refused.
func testDeliveryWatches[TTx any](t *testing.T, h opener[TTx]) {
	ctx := context.Background()
	db := open(t, h, true)
	t0 := db.stopClock()
	d := db.Delivery()
	if got, err := d.Watches(ctx); err != nil || len(got) != 0 {
		t.Fatalf("no watches yet: %+v %v", got, err)
	}
	// Times of another zone, with nanoseconds: read back in UTC, to the
	// microsecond.
	zone := time.FixedZone("UTC+2", 2*3600)
	from := time.Date(2026, 12, 6, 14, 0, 0, 123456789, zone)
	full := store.AuditWatch{Name: "nats-orders", Broker: "nats://broker:4222 stream ORDERS", From: from, To: from.Add(time.Minute),
		Passes: 12, Failed: 1, Lost: 2, Phantoms: 3, Duplicates: 4, OrderBreaks: 5, Interval: 30 * time.Second,
		LastError: "read the stream: timeout", Findings: json.RawMessage(`[{"kind": "lost", "id": "01939f3a", "topic": "orders", "seq": 7},
 {"kind":"duplicate","id":"01939f3b","count":2,"note":"ünïcode \u00e9"}]`),
		StartedAt: from.Add(-time.Hour)}
	if err := d.SaveWatch(ctx, full); err != nil {
		t.Fatalf("save: %v", err)
	}
	db.clock.Set(t0.Add(time.Second))
	// Upper case before lower case: byte order, whatever the collation.
	for _, name := range []string{"amqp", "Zeta"} {
		if err := d.SaveWatch(ctx, store.AuditWatch{Name: name}); err != nil {
			t.Fatalf("save %s: %v", name, err)
		}
	}
	got, err := d.Watches(ctx)
	if err != nil {
		t.Fatalf("watches: %v", err)
	}
	if names := watchNames(got); !slices.Equal(names, []string{"Zeta", "amqp", "nats-orders"}) {
		t.Fatalf("watches %q, want Zeta, amqp, nats-orders (by name, byte for byte)", names)
	}
	want := full
	want.From, want.To, want.StartedAt = utcMicros(full.From), utcMicros(full.To), utcMicros(full.StartedAt)
	want.UpdatedAt = t0
	checkWatch(t, got[2], want)
	checkWatch(t, got[1], store.AuditWatch{Name: "amqp", UpdatedAt: t0.Add(time.Second)})

	// Replaced whole: what the new one lacks is gone.
	db.clock.Set(t0.Add(2 * time.Second))
	next := store.AuditWatch{Name: "nats-orders", Broker: "nats://broker:4222 stream ORDERS", To: from.Add(2 * time.Minute), Passes: 13, Lost: 2, Interval: time.Minute}
	if err := d.SaveWatch(ctx, next); err != nil {
		t.Fatalf("replace: %v", err)
	}
	got, err = d.Watches(ctx)
	if err != nil || len(got) != 3 {
		t.Fatalf("watches after the replace: %+v %v", got, err)
	}
	next.To, next.UpdatedAt = utcMicros(next.To), t0.Add(2*time.Second)
	checkWatch(t, got[2], next)

	if ok, err := d.DeleteWatch(ctx, "amqp"); err != nil || !ok {
		t.Fatalf("delete amqp: %v %v, want true", ok, err)
	}
	if ok, err := d.DeleteWatch(ctx, "amqp"); err != nil || ok {
		t.Fatalf("delete amqp again: %v %v, want false", ok, err)
	}
	if got, err := d.Watches(ctx); err != nil || !slices.Equal(watchNames(got), []string{"Zeta", "nats-orders"}) {
		t.Fatalf("watches after the delete: %q %v", watchNames(got), err)
	}

	for _, bad := range []struct {
		w     store.AuditWatch
		field string
	}{
		{store.AuditWatch{Broker: "nats"}, "Name"},
		{store.AuditWatch{Name: "w", Lost: -1}, "Lost"},
		{store.AuditWatch{Name: "w", Interval: -time.Second}, "Interval"},
		{store.AuditWatch{Name: "w", Findings: json.RawMessage(`[{"kind":`)}, "Findings"},
	} {
		if err := d.SaveWatch(ctx, bad.w); err == nil || !strings.Contains(err.Error(), bad.field) {
			t.Errorf("save %+v: %v, want an error naming %s", bad.w, err, bad.field)
		}
	}
	if got, err := d.Watches(ctx); err != nil || len(got) != 2 {
		t.Fatalf("watches after the refused saves: %q %v", watchNames(got), err)
	}
}

// checkWatch fails t unless got is want, its findings equal as JSON.
func checkWatch(t *testing.T, got, want store.AuditWatch) {
	t.Helper()
	for _, tt := range []struct {
		name      string
		got, want time.Time
	}{{"From", got.From, want.From}, {"To", got.To, want.To}, {"StartedAt", got.StartedAt, want.StartedAt}, {"UpdatedAt", got.UpdatedAt, want.UpdatedAt}} {
		if !tt.got.Equal(tt.want) || tt.got.Location() != time.UTC {
			t.Errorf("watch %s: %s %s, want %s in UTC", want.Name, tt.name, tt.got, tt.want)
		}
	}
	if (got.Findings == nil) != (want.Findings == nil) || got.Findings != nil && !jsonEqual(t, got.Findings, want.Findings) {
		t.Errorf("watch %s: findings %s, want %s", want.Name, got.Findings, want.Findings)
	}
	got.From, got.To, got.StartedAt, got.UpdatedAt, got.Findings = want.From, want.To, want.StartedAt, want.UpdatedAt, want.Findings
	if !reflect.DeepEqual(got, want) {
		t.Errorf("watch:\n got %+v\nwant %+v", got, want)
	}
}

// jsonEqual reports whether a and b hold the same JSON value, whatever
// their spacing and their objects' key order.
func jsonEqual(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(va, vb)
}

func watchNames(ws []store.AuditWatch) []string {
	names := make([]string, len(ws))
	for i, w := range ws {
		names[i] = w.Name
	}
	return names
}

// utcMicros is t as a time column gives it back.
func utcMicros(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// Latency samples are recorded at the store's clock, those without
// messages not at all, and read back whole (buckets included) from a time
// on, oldest first and in the order recorded, up to a limit; a sample
// that cannot be is refused with the field named, and nothing of its call
// is recorded.
func testDeliveryLatency[TTx any](t *testing.T, h opener[TTx]) {
	ctx := context.Background()
	db := open(t, h, true)
	t0 := db.stopClock()
	d := db.Delivery()
	if got, err := d.Latency(ctx, time.Time{}, 10); err != nil || len(got) != 0 {
		t.Fatalf("no samples yet: %+v %v", got, err)
	}
	first := []store.LatencySample{
		{Consumer: "billing", Topic: "orders", Period: 10 * time.Second, Messages: 6, SumSeconds: 0.75, Skewed: 1, Buckets: []int64{1, 2, 0, 3}},
		{Consumer: "billing", Topic: "refunds", Period: 10 * time.Second, Messages: 0, Buckets: []int64{0, 0, 0, 0}},
		{Consumer: "shipping", Topic: "orders", Period: 9 * time.Second, Messages: 1, SumSeconds: 12.5, Buckets: []int64{0, 0, 0, 1}},
	}
	if err := d.RecordLatency(ctx, first); err != nil {
		t.Fatalf("record: %v", err)
	}
	db.clock.Set(t0.Add(time.Second))
	second := []store.LatencySample{{Consumer: "audit", Topic: "orders", Period: time.Second, Messages: 2, SumSeconds: 0.002, Buckets: []int64{2}}}
	if err := d.RecordLatency(ctx, second); err != nil {
		t.Fatalf("record the second: %v", err)
	}
	if err := d.RecordLatency(ctx, []store.LatencySample{{Consumer: "idle", Topic: "orders"}}); err != nil {
		t.Fatalf("record a sample without messages: %v", err)
	}
	if err := d.RecordLatency(ctx, nil); err != nil {
		t.Fatalf("record nothing: %v", err)
	}

	latency := func(since time.Time, limit int) []store.LatencySample {
		t.Helper()
		got, err := d.Latency(ctx, since, limit)
		if err != nil {
			t.Fatalf("latency from %s, limit %d: %v", since, limit, err)
		}
		return got
	}
	got := latency(time.Time{}, 10)
	want := []store.LatencySample{first[0], first[2], second[0]}
	want[0].At, want[1].At, want[2].At = t0, t0, t0.Add(time.Second)
	checkSamples(t, "every sample", got, want)
	if len(got) == 3 && !(got[0].ID < got[1].ID && got[1].ID < got[2].ID) {
		t.Errorf("ids %d, %d, %d: want them increasing in the order recorded", got[0].ID, got[1].ID, got[2].ID)
	}
	checkSamples(t, "from t0+1s", latency(t0.Add(time.Second), 10), want[2:])
	checkSamples(t, "from t0+1ms", latency(t0.Add(time.Millisecond), 10), want[2:])
	checkSamples(t, "the first 2", latency(t0, 2), want[:2])
	checkSamples(t, "from an hour later", latency(t0.Add(time.Hour), 10), nil)
	for _, limit := range []int{0, -1} {
		if _, err := d.Latency(ctx, time.Time{}, limit); err == nil || !strings.Contains(err.Error(), "limit") {
			t.Errorf("limit %d: %v, want an error naming the limit", limit, err)
		}
	}

	ok := store.LatencySample{Consumer: "c", Topic: "t", Messages: 1, Buckets: []int64{1}}
	for _, bad := range []struct {
		s     store.LatencySample
		field string
	}{
		{store.LatencySample{Topic: "t", Messages: 1}, "Consumer"},
		{store.LatencySample{Consumer: "c", Messages: 1}, "Topic"},
		{store.LatencySample{Consumer: "c", Topic: "t", Messages: -1}, "Messages"},
		{store.LatencySample{Consumer: "c", Topic: "t", Messages: 1, Skewed: -1}, "Skewed"},
		{store.LatencySample{Consumer: "c", Topic: "t", Messages: 1, Period: -time.Second}, "Period"},
		{store.LatencySample{Consumer: "c", Topic: "t", Messages: 1, SumSeconds: math.NaN()}, "SumSeconds"},
		{store.LatencySample{Consumer: "c", Topic: "t", Messages: 1, Buckets: []int64{1, -1}}, "Buckets[1]"},
	} {
		if err := d.RecordLatency(ctx, []store.LatencySample{ok, bad.s}); err == nil || !strings.Contains(err.Error(), bad.field) {
			t.Errorf("record %+v: %v, want an error naming %s", bad.s, err, bad.field)
		}
	}
	if got := latency(time.Time{}, 10); len(got) != 3 {
		t.Fatalf("after the refused samples: %d samples, want the 3 recorded before", len(got))
	}
}

// checkSamples fails t unless got is want, ids aside (and buckets of
// none equal to an empty list).
func checkSamples(t *testing.T, what string, got, want []store.LatencySample) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d samples %+v, want %d", what, len(got), got, len(want))
		return
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.ID <= 0 || !g.At.Equal(w.At) || g.At.Location() != time.UTC || !slices.Equal(g.Buckets, w.Buckets) {
			t.Errorf("%s: sample %d: id %d at %s buckets %v, want an id, at %s in UTC, buckets %v", what, i, g.ID, g.At, g.Buckets, w.At, w.Buckets)
		}
		g.ID, g.At, g.Buckets = w.ID, w.At, w.Buckets
		if !reflect.DeepEqual(g, w) {
			t.Errorf("%s: sample %d:\n got %+v\nwant %+v", what, i, g, w)
		}
	}
}

// Latency returns at most store.MaxLatencyRows samples, whatever the limit
// asked, and RecordLatency records many samples at once (in several
// statements, one transaction).
func testDeliveryLatencyLimit[TTx any](t *testing.T, h opener[TTx]) {
	ctx := context.Background()
	db := open(t, h, true)
	t0 := db.stopClock()
	d := db.Delivery()
	samples := make([]store.LatencySample, store.MaxLatencyRows+1)
	for i := range samples {
		samples[i] = store.LatencySample{Consumer: "c", Topic: "t", Messages: int64(i + 1), Buckets: []int64{int64(i + 1)}}
	}
	if err := d.RecordLatency(ctx, samples); err != nil {
		t.Fatalf("record %d samples: %v", len(samples), err)
	}
	if n := db.count(t, "courier_latency"); n != len(samples) {
		t.Fatalf("%d samples recorded, want %d", n, len(samples))
	}
	got, err := d.Latency(ctx, t0, store.MaxLatencyRows+5)
	if err != nil || len(got) != store.MaxLatencyRows {
		t.Fatalf("limit %d: %d samples, %v; want %d", store.MaxLatencyRows+5, len(got), err, store.MaxLatencyRows)
	}
	for i, s := range got {
		if s.Messages != int64(i+1) {
			t.Fatalf("sample %d has %d messages, want %d: not in the order recorded", i, s.Messages, i+1)
		}
	}
}

// Trim deletes the latency samples recorded before its time
// (store.TableLatency), at most Limit a batch, each batch going on from
// where the previous one ended, and keeps those recorded at or after it.
func testDeliveryLatencyTrim[TTx any](t *testing.T, h opener[TTx]) {
	ctx := context.Background()
	db := open(t, h, true)
	t0 := db.stopClock()
	d, ops := db.Delivery(), db.Operations()
	record := func(at time.Time, consumers ...string) {
		t.Helper()
		db.clock.Set(at)
		samples := make([]store.LatencySample, len(consumers))
		for i, c := range consumers {
			samples[i] = store.LatencySample{Consumer: c, Topic: "orders", Period: 10 * time.Second, Messages: 1, SumSeconds: 0.01, Buckets: []int64{1}}
		}
		if err := d.RecordLatency(ctx, samples); err != nil {
			t.Fatalf("record at %s: %v", at, err)
		}
	}
	record(t0, "a", "b", "c")
	record(t0.Add(time.Minute), "a", "b")
	recent := t0.Add(time.Hour)
	record(recent, "a", "b")

	if res, err := ops.Trim(ctx, store.Trim{Table: store.TableLatency, Before: t0}); err != nil || res.Deleted != 0 {
		t.Fatalf("trim before the oldest sample: %+v, %v; want nothing deleted", res, err)
	}
	var batches []int64
	after := ""
	for range 10 {
		res, err := ops.Trim(ctx, store.Trim{Table: store.TableLatency, Before: recent.Add(-30 * time.Minute), After: after, Limit: 2})
		if err != nil {
			t.Fatalf("trim batch %d: %v", len(batches)+1, err)
		}
		batches = append(batches, res.Deleted)
		if res.Deleted < 2 {
			break
		}
		after = res.Next
	}
	if !slices.Equal(batches, []int64{2, 2, 1}) {
		t.Fatalf("batches of 2 deleted %v samples, want [2 2 1] (the 5 recorded more than 30 minutes before the last)", batches)
	}
	got, err := d.Latency(ctx, time.Time{}, 10)
	if err != nil || len(got) != 2 || !got[0].At.Equal(recent) || !got[1].At.Equal(recent) {
		t.Fatalf("samples left: %+v, %v; want the 2 recorded at %s", got, err, recent)
	}
	if res, err := ops.Trim(ctx, store.Trim{Table: store.TableLatency, Before: recent}); err != nil || res.Deleted != 0 {
		t.Fatalf("trim before %s, when the samples left were recorded: %+v, %v; want none deleted", recent, res, err)
	}
	if res, err := ops.Trim(ctx, store.Trim{Table: store.TableLatency, Before: recent.Add(time.Microsecond)}); err != nil || res.Deleted != 2 {
		t.Fatalf("trim a microsecond later: %+v, %v; want the 2 deleted", res, err)
	}
}
