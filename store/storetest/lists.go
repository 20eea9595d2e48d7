package storetest

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/wire"
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
	a := db.Admin()
	all := deadLettersToList(t, db)
	checkDeadLetterLists(t, a, all)
	checkDeadLetterSummaries(t, a, all)
	pid := parkedToList(t, db)
	checkParkedLists(t, a, pid)
	checkParkedSummaries(t, a, pid)
}

// longError is an error longer than a summary's preview, whose last
// character in the preview takes two bytes.
var longError = strings.Repeat("é", store.ErrorPreview-1) + "ü tail past the preview"

// deadLettersToList parks five messages of topics orders, orders.eu and
// payments as dead letters with errors to filter on, the third with a
// 1 MiB payload and longError, and returns their ids.
func deadLettersToList[TTx any](t *testing.T, db *testDB[TTx]) []int64 {
	st := db.newStore(t, false)
	msgs := []courier.Message{
		courier.NewMessage("orders", "o-1", "OrderPlaced", []byte(`{"total":42}`)),
		courier.NewMessage("orders.eu", "o-2", "OrderPlaced", nil),
		courier.NewMessage("payments", "p-1", "ChargeRequested", make([]byte, 1<<20)),
		courier.NewMessage("orders", "o-3", "OrderShipped", []byte("x")),
		courier.NewMessage("orders", "o-4", "OrderShipped", []byte("xy")),
	}
	errs := []string{"Message Too Large", "schema REJECTED", longError, "disk 100% full_now", "quota 100 percent: full now"}
	db.write(t, msgs...)
	b := claim(t, st, "r", 10, time.Minute)
	var o store.Outcome
	for i, r := range b.Records {
		o.Dead = append(o.Dead, store.Failure{Seq: r.Seq, Error: errs[i], Counted: true})
	}
	complete(t, st, "r", b, o)
	return seqs(b.Records)
}

// listCase is a query of a list and the ids it should return.
type listCase struct {
	q    store.ListQuery
	want []int64
}

// checkList runs each case's query through list, named what, and compares
// the ids (id) of what it returns with the case's.
func checkList[S any](t *testing.T, what string, list func(context.Context, store.ListQuery) ([]S, error), id func(S) int64, cases []listCase) {
	t.Helper()
	for _, c := range cases {
		got, err := list(context.Background(), c.q)
		must(t, err, "%s(%+v)", what, c.q)
		ids := []int64{}
		for _, s := range got {
			ids = append(ids, id(s))
		}
		if !slices.Equal(ids, c.want) {
			t.Errorf("%s(%+v) = %v, want %v", what, c.q, ids, c.want)
		}
	}
}

// checkDeadLetterLists filters and pages the dead letters of
// deadLettersToList, all.
func checkDeadLetterLists(t *testing.T, a store.Admin, all []int64) {
	checkList(t, "ListDeadLetters", a.ListDeadLetters, func(d store.DeadLetterSummary) int64 { return d.ID }, []listCase{
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
	})
	for _, q := range []store.ListQuery{{Limit: -1}, {Limit: store.MaxListLimit + 1}, {IDs: make([]int64, store.MaxListLimit+1)}} {
		if _, err := a.ListDeadLetters(context.Background(), q); err == nil || !strings.Contains(err.Error(), "ListQuery.") {
			t.Errorf("ListDeadLetters(Limit %d, %d ids) = %v, want an error naming the field", q.Limit, len(q.IDs), err)
		}
	}
}

// checkDeadLetterSummaries compares each summary of the dead letters of
// deadLettersToList, all, with the full dead letter.
func checkDeadLetterSummaries(t *testing.T, a store.Admin, all []int64) {
	ctx := context.Background()
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
}

// parkedToList parks four deliveries of consumers billing and shipping,
// asks for the second one's replay, and returns their ids.
func parkedToList[TTx any](t *testing.T, db *testDB[TTx]) []int64 {
	ctx := context.Background()
	cs, a := db.ConsumerStore(), db.Admin()
	parked := []store.Parked{
		{Consumer: "billing", MessageID: uuid.NewString(), Subject: "courier.payments", Headers: map[string][]string{"Courier-Type": {"ChargeRequested"}},
			Payload: []byte("charge"), Reason: store.ReasonFailed, Error: "card DECLINED", Attempts: 5},
		{Consumer: "billing", MessageID: uuid.NewString(), Subject: "payments", Payload: make([]byte, 70_000), Reason: store.ReasonFailed, Error: longError, Attempts: 2},
		{Consumer: "shipping", Subject: "courier.xpayments", Headers: map[string][]string{"Courier-Type": {""}, "ce-type": {"com.example.Shipped", "x"}},
			Payload: []byte{}, Reason: store.ReasonMalformed, Error: "no Courier headers", Attempts: 1},
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
	return pid
}

// checkParkedLists filters and pages the deliveries of parkedToList, pid.
func checkParkedLists(t *testing.T, a store.Admin, pid []int64) {
	checkList(t, "ListParked", a.ListParked, func(p store.ParkedSummary) int64 { return p.ID }, []listCase{
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
	})
}

// checkParkedSummaries compares each summary of the deliveries of
// parkedToList, pid, with the full parked delivery.
func checkParkedSummaries(t *testing.T, a store.Admin, pid []int64) {
	ctx := context.Background()
	psums, err := a.ListParked(ctx, store.ListQuery{})
	must(t, err, "ListParked")
	for _, s := range psums {
		p, err := a.ParkedMessage(ctx, s.ID)
		must(t, err, "ParkedMessage(%d)", s.ID)
		switch {
		case s.Consumer != p.Consumer || s.MessageID != p.MessageID || s.Subject != p.Subject || s.Reason != p.Reason || s.Attempts != p.Attempts:
			t.Errorf("summary of parked %d: %+v, want what %+v holds", s.ID, s, p)
		case s.Type != wire.TypeOf(p.Headers):
			t.Errorf("summary of parked %d: type %q, want %q (headers %v)", s.ID, s.Type, wire.TypeOf(p.Headers), p.Headers)
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
