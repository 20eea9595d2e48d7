package storetest

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
)

// Admin's lists hold at most store.TextPreview characters of each text
// and store.ErrorPreview of an error, whatever the rows hold: a parked
// delivery whose headers and error are 2 MB long lists with the type its
// headers name and the start of its texts; so do a dead letter and a
// scheduled message whose texts were made longer than a Message's may be
// (where the schema takes them: MySQL's columns are as wide as a Message's
// fields, a parked delivery's reason 32 characters).
func testAdminListBounds[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	ctx, a := context.Background(), db.Admin()
	huge := strings.Repeat("x", 2<<20)
	// long's characters take two bytes each, so that a cut counted in
	// bytes would show.
	long := strings.Repeat("é", store.TextPreview) + "ü past the preview"
	must(t, db.ConsumerStore().Park(ctx, store.Parked{Consumer: "billing", MessageID: uuid.NewString(), Subject: long,
		Headers: map[string][]string{"X-Bulk": {huge}, "Courier-Type": {long, huge}, "Type": {huge}}, Payload: []byte("x"),
		Reason: store.ReasonFailed, Error: huge, Attempts: 1}), "park")
	m := courier.NewMessage("orders", "o-1", "OrderPlaced", []byte("x"))
	db.write(t, m)
	st := db.newStore(t, false)
	b := claim(t, st, "r", 1, time.Minute)
	complete(t, st, "r", b, store.Outcome{Dead: []store.Failure{{Seq: b.Records[0].Seq, Error: huge, Counted: true}}})
	db.schedule(t, store.Due{After: time.Hour}, courier.NewMessage("orders", "o-2", "OrderPlaced", []byte("x")))
	stretched := map[string]bool{} // table.column
	for table, cols := range map[string][]string{
		"courier_inbox_dead_letters":  {"consumer", "message_id", "reason"},
		"courier_outbox_dead_letters": {"topic", "ordering_key", "type"},
		"courier_outbox_scheduled":    {"topic", "ordering_key", "type"},
	} {
		for _, col := range cols {
			err := db.InTx(ctx, func(tx TTx) error { _, err := db.Exec(ctx, tx, "UPDATE "+table+" SET "+col+" = ?", long); return err })
			if err != nil {
				t.Logf("%s.%s holds no more than a Message's field: %v", table, col, err)
			}
			stretched[table+"."+col] = err == nil
		}
	}

	// cut reports a text of a summary that is not the start of the row's,
	// or is longer than n characters, or shorter while the row's is not.
	cut := func(what, got, whole string, n int) {
		t.Helper()
		if utf8.RuneCountInString(got) > n || !strings.HasPrefix(whole, got) || (len(got) < len(whole) && utf8.RuneCountInString(got) < n) {
			t.Errorf("%s: %d characters (%.20q…), want the first %d of the row's %d", what, utf8.RuneCountInString(got), got, n, utf8.RuneCountInString(whole))
		}
	}
	parked, err := a.ListParked(ctx, store.ListQuery{})
	must(t, err, "ListParked")
	if len(parked) != 1 {
		t.Fatalf("ListParked: %d summaries, want 1", len(parked))
	}
	s := parked[0]
	p, err := a.ParkedMessage(ctx, s.ID)
	must(t, err, "ParkedMessage")
	cut("parked consumer", s.Consumer, p.Consumer, store.TextPreview)
	cut("parked message id", s.MessageID, p.MessageID, store.TextPreview)
	cut("parked subject", s.Subject, p.Subject, store.TextPreview)
	cut("parked reason", s.Reason, p.Reason, store.TextPreview)
	cut("parked type", s.Type, long, store.TextPreview)
	cut("parked error", s.Error, p.Error, store.ErrorPreview)
	if s.Type == "" || s.PayloadSize != 1 {
		t.Errorf("parked summary: type %.20q…, payload %d bytes; want the start of Courier-Type's first value, 1 byte", s.Type, s.PayloadSize)
	}

	dead, err := a.ListDeadLetters(ctx, store.ListQuery{})
	must(t, err, "ListDeadLetters")
	if len(dead) != 1 {
		t.Fatalf("ListDeadLetters: %d summaries, want 1", len(dead))
	}
	d, err := a.DeadLetter(ctx, dead[0].ID)
	must(t, err, "DeadLetter")
	cut("dead letter topic", dead[0].Topic, d.Topic, store.TextPreview)
	cut("dead letter key", dead[0].Key, d.Key, store.TextPreview)
	cut("dead letter type", dead[0].Type, d.Type, store.TextPreview)
	cut("dead letter error", dead[0].LastError, d.LastError, store.ErrorPreview)

	sched, err := a.ListScheduled(ctx, store.ScheduleFilter{})
	must(t, err, "ListScheduled")
	if len(sched) != 1 {
		t.Fatalf("ListScheduled: %d messages, want 1", len(sched))
	}
	for _, c := range []struct{ col, got, was string }{
		{"topic", sched[0].Topic, "orders"}, {"ordering_key", sched[0].Key, "o-2"}, {"type", sched[0].Type, "OrderPlaced"},
	} {
		if stretched["courier_outbox_scheduled."+c.col] {
			c.was = long
		}
		cut("scheduled "+c.col, c.got, c.was, store.TextPreview)
	}
}
