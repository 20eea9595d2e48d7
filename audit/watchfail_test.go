package audit_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/audit"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
)

// locateFails is a shop's database whose Locate fails while fail is set.
type locateFails struct {
	audit.Database
	mu   sync.Mutex
	fail bool
}

func (d *locateFails) Locate(ctx context.Context, ids []string) (map[string]store.Place, error) {
	d.mu.Lock()
	fail := d.fail
	d.mu.Unlock()
	if fail {
		return nil, errors.New("connection reset by peer")
	}
	return d.Database.Locate(ctx, ids)
}

func (d *locateFails) set(fail bool) {
	d.mu.Lock()
	d.fail = fail
	d.mu.Unlock()
}

// A pass that fails after it judged part of its range (the database
// fails while the pass looks up the messages the copies lack) leaves the
// whole range to the next pass: the phantom, the duplicate and the lost
// message it was judging are found by the next pass, counted once and
// logged once.
func TestWatchPassFailedJudgesAgain(t *testing.T) {
	s := newShop(t)
	msgs := messages(10, 2)
	s.write(msgs...)
	s.relay()
	lost := msgs[3]
	if s.pub.Forget(lost.ID) != 1 {
		t.Fatal("forget the lost message")
	}
	phantom := courier.NewMessage("orders", "k9", "OrderPlaced", nil)
	testenv.Must(t, s.pub.Publish(context.Background(), []courier.Message{phantom, msgs[5]})[0], "publish a phantom and a duplicate")

	db := &locateFails{Database: s.st.Operations()}
	var logged bytes.Buffer
	w, err := audit.NewWatcher(db, s.pub, audit.WatchConfig{Clock: s.clock.Now, Slack: watchSlack, Interval: watchInterval,
		Since: watchInterval, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	testenv.Must(t, err, "new watcher")
	db.set(true)
	s.clock.Advance(watchInterval)
	if _, err := w.Pass(context.Background()); err == nil {
		t.Fatal("the pass succeeded with Locate failing")
	}
	db.set(false)
	p := s.pass(w)
	st := w.State()
	for kind, m := range map[string]courier.Message{audit.KindLost: lost, audit.KindPhantom: phantom, audit.KindDuplicate: msgs[5]} {
		if p.Count(kind) != 1 {
			t.Errorf("the pass after the failed one found %d %s; want 1 (%s)", p.Count(kind), kind, m.ID)
		}
		if n := strings.Count(logged.String(), m.ID.String()); n != 1 {
			t.Errorf("the %s %s is logged %d times; want once:\n%s", kind, m.ID, n, logged.String())
		}
	}
	if st.Lost != 1 || st.Phantoms != 1 || st.Duplicates != 1 || st.Failed != 1 {
		t.Errorf("state %+v; want 1 lost, 1 phantom, 1 duplicate, 1 failed pass", st)
	}
}
