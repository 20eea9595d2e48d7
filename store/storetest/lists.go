package storetest

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
)

// Admin lists dead letters and parked deliveries as summaries, a page at a
// time, by id: filtered by topic (consumer side: the subject, or its end
// after a dot), consumer and error text (ignoring the case of ASCII
// letters, the text taken as it is, not as a pattern) and ids; each
// summary holds what the full row holds, but its payload's size instead of
// the payload and the start of its last error.
func testAdminLists[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	ctx := context.Background()
	st, a := db.newStore(t, false), db.Admin()

	long := strings.Repeat("é", store.ErrorPreview-1) + "ü tail past the preview"
	msgs := []courier.Message{
		courier.NewMessage("orders", "o-1", "OrderPlaced", []byte(`{"total":42}`)),
		courier.NewMessage("orders.eu", "o-2", "OrderPlaced", nil),
		courier.NewMessage("payments", "p-1", "ChargeRequested", make([]byte, 1<<20)),
		courier.NewMessage("orders", "o-3", "OrderShipped", []byte("x")),
		courier.NewMessage("orders", "o-4", "OrderShipped", []byte("xy")),
	}
	errs := []string{"Message Too Large", "schema REJECTED", long, "disk 100% full_now", "quota 100 percent: full now"}
	db.write(t, msgs...)
	b := claim(t, st, "r", 10, time.Minute)
	var o store.Outcome
	for i, r := range b.Records {
		o.Dead = append(o.Dead, store.Failure{Seq: r.Seq, Error: errs[i], Counted: true})
	}
	complete(t, st, "r", b, o)
	all := seqs(b.Records)

	list := func(q store.ListQuery) []int64 {
		t.Helper()
		ds, err := a.ListDeadLetters(ctx, q)
		must(t, err, "ListDeadLetters(%+v)", q)
		out := []int64{}
		for _, d := range ds {
			out = append(out, d.ID)
		}
		return out
	}
	for _, c := range []struct {
		q    store.ListQuery
		want []int64
	}{
		{store.ListQuery{}, all},
		{store.ListQuery{Topic: "orders"}, []int64{all[0], all[3], all[4]}},
		{store.ListQuery{Topic: "eu"}, []int64{}},
		{store.ListQuery{Consumer: "billing"}, all},
		{store.ListQuery{Error: "too large"}, all[:1]},
		{store.ListQuery{Error: "SCHEMA rejected"}, all[1:2]},
		{store.ListQuery{Error: "100%"}, all[3:4]},
		{store.ListQuery{Error: "_"}, all[3:4]},
		{store.ListQuery{Error: "%"}, all[3:4]},
		{store.ListQuery{Error: "ü TAIL"}, all[2:3]},
		{store.ListQuery{Error: "full", Topic: "orders"}, all[3:5]},
		{store.ListQuery{IDs: []int64{all[4], all[0], all[4] + 1000}}, []int64{all[0], all[4]}},
		{store.ListQuery{IDs: []int64{all[4], all[1]}, Topic: "orders"}, all[4:5]},
		{store.ListQuery{Limit: 2}, all[:2]},
		{store.ListQuery{After: all[1], Limit: 2}, all[2:4]},
		{store.ListQuery{After: all[3], Limit: 2}, all[4:]},
		{store.ListQuery{After: all[4]}, []int64{}},
		{store.ListQuery{Topic: "orders", After: all[0], Limit: 1}, all[3:4]},
	} {
		if got := list(c.q); !slices.Equal(got, c.want) {
			t.Errorf("ListDeadLetters(%+v) = %v, want %v", c.q, got, c.want)
		}
	}
	sums, err := a.ListDeadLetters(ctx, store.ListQuery{})
	must(t, err, "ListDeadLetters")
	for _, s := range sums {
		d, err := a.DeadLetter(ctx, s.ID)
		must(t, err, "DeadLetter(%d)", s.ID)
		want := store.DeadLetterSummary{ID: d.ID, MessageID: d.MessageID, Topic: d.Topic, Key: d.Key, Type: d.Type, Attempts: d.Attempts,
			LastError: preview(d.LastError), PayloadSize: int64(len(d.Payload)), CreatedAt: d.CreatedAt, DeadAt: d.DeadAt}
		if !s.CreatedAt.Equal(want.CreatedAt) || !s.DeadAt.Equal(want.DeadAt) {
			t.Errorf("summary of dead letter %d: created %s, dead %s; want %s, %s", s.ID, s.CreatedAt, s.DeadAt, want.CreatedAt, want.DeadAt)
		}
		s.CreatedAt, s.DeadAt = want.CreatedAt, want.DeadAt
		if s != want {
			t.Errorf("summary of dead letter %d:\n got %+v\nwant %+v", s.ID, s, want)
		}
	}
	if len(sums) == len(all) && (sums[2].PayloadSize != 1<<20 || sums[1].PayloadSize != 0 || sums[2].LastError != strings.Repeat("é", store.ErrorPreview-1)+"ü") {
		t.Errorf("summaries: payload sizes %d and %d, want 1 MiB and 0; error preview %q", sums[2].PayloadSize, sums[1].PayloadSize, sums[2].LastError)
	}
	for _, q := range []store.ListQuery{{Limit: -1}, {Limit: store.MaxListLimit + 1}, {IDs: make([]int64, store.MaxListLimit+1)}} {
		if _, err := a.ListDeadLetters(ctx, q); err == nil || !strings.Contains(err.Error(), "ListQuery.") {
			t.Errorf("ListDeadLetters(Limit %d, %d ids) = %v, want an error naming the field", q.Limit, len(q.IDs), err)
		}
	}

	// The consumer side.
	cs := db.ConsumerStore()
	parked := []store.Parked{
		{Consumer: "billing", MessageID: uuid.NewString(), Subject: "courier.payments", Headers: map[string][]string{"Courier-Type": {"ChargeRequested"}},
			Payload: []byte("charge"), Reason: store.ReasonFailed, Error: "card DECLINED", Attempts: 5},
		{Consumer: "billing", MessageID: uuid.NewString(), Subject: "payments", Payload: make([]byte, 70_000), Reason: store.ReasonFailed, Error: long, Attempts: 2},
		{Consumer: "shipping", Subject: "courier.xpayments", Payload: []byte{}, Reason: store.ReasonMalformed, Error: "no Courier headers", Attempts: 1},
		{Consumer: "billing", Subject: "courier.orders", Payload: []byte{1}, Reason: store.ReasonMalformed, Error: "no handler", Attempts: 1},
	}
	for _, p := range parked {
		must(t, cs.Park(ctx, p), "park")
	}
	full, err := a.Parked(ctx, "", 10)
	must(t, err, "Parked")
	if len(full) != len(parked) {
		t.Fatalf("%d parked, want %d", len(full), len(parked))
	}
	pid := parkedIDs(full)
	must(t, a.RequestReplay(ctx, pid[1]), "request replay")
	listParked := func(q store.ListQuery) []int64 {
		t.Helper()
		ps, err := a.ListParked(ctx, q)
		must(t, err, "ListParked(%+v)", q)
		out := []int64{}
		for _, p := range ps {
			out = append(out, p.ID)
		}
		return out
	}
	for _, c := range []struct {
		q    store.ListQuery
		want []int64
	}{
		{store.ListQuery{}, pid},
		{store.ListQuery{Topic: "payments"}, pid[:2]},
		{store.ListQuery{Topic: "courier.payments"}, pid[:1]},
		{store.ListQuery{Topic: "xpayments"}, pid[2:3]},
		{store.ListQuery{Consumer: "billing"}, []int64{pid[0], pid[1], pid[3]}},
		{store.ListQuery{Consumer: "Billing"}, []int64{}},
		{store.ListQuery{Consumer: "billing", Topic: "payments", Error: "declined"}, pid[:1]},
		{store.ListQuery{Error: "MALFORMED"}, pid[2:]},
		{store.ListQuery{Error: "handler"}, pid[3:]},
		{store.ListQuery{IDs: []int64{pid[3], pid[0]}, Consumer: "billing"}, []int64{pid[0], pid[3]}},
		{store.ListQuery{After: pid[0], Limit: 2}, pid[1:3]},
	} {
		if got := listParked(c.q); !slices.Equal(got, c.want) {
			t.Errorf("ListParked(%+v) = %v, want %v", c.q, got, c.want)
		}
	}
	psums, err := a.ListParked(ctx, store.ListQuery{})
	must(t, err, "ListParked")
	for _, s := range psums {
		p, err := a.ParkedMessage(ctx, s.ID)
		must(t, err, "ParkedMessage(%d)", s.ID)
		switch {
		case s.Consumer != p.Consumer || s.MessageID != p.MessageID || s.Subject != p.Subject || s.Reason != p.Reason || s.Attempts != p.Attempts:
			t.Errorf("summary of parked %d: %+v, want what %+v holds", s.ID, s, p)
		case !maps.EqualFunc(s.Headers, p.Headers, slices.Equal[[]string]):
			t.Errorf("summary of parked %d: headers %v, want %v", s.ID, s.Headers, p.Headers)
		case s.Error != preview(p.Error) || s.PayloadSize != int64(len(p.Payload)) || !s.ParkedAt.Equal(p.ParkedAt):
			t.Errorf("summary of parked %d: error %q, %d bytes, parked %s; want %q, %d, %s", s.ID, s.Error, s.PayloadSize, s.ParkedAt, preview(p.Error), len(p.Payload), p.ParkedAt)
		case (s.ReplayRequested == nil) != (p.ReplayRequested == nil) || (s.ID == pid[1]) != (s.ReplayRequested != nil):
			t.Errorf("summary of parked %d: replay requested %v, want %v (asked for %d only)", s.ID, s.ReplayRequested, p.ReplayRequested, pid[1])
		}
	}
}

// preview is the start of an error a summary holds.
func preview(s string) string {
	if r := []rune(s); len(r) > store.ErrorPreview {
		return string(r[:store.ErrorPreview])
	}
	return s
}
