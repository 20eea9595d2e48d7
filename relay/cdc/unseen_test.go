package cdc_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/relay/cdc"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/postgres"
)

// unseenFirst is the relay's database, whose first Fail finds no row, as
// when the log brings a commit before other sessions see its rows: it
// writes nothing and answers -1 for each failure.
type unseenFirst struct {
	cdc.Database
	mu   sync.Mutex
	seen bool
}

func (u *unseenFirst) Fail(ctx context.Context, fs []store.LogFailure) ([]int, error) {
	u.mu.Lock()
	first := !u.seen
	u.seen = true
	u.mu.Unlock()
	if !first {
		return u.Database.Fail(ctx, fs)
	}
	out := make([]int, len(fs))
	for i := range out {
		out[i] = -1
	}
	return out, nil
}

// A failure recorded while its row is not seen yet is not lost: the relay
// keeps its history and counted attempt, and writes them with the next
// failure, so the dead letter holds every attempt, as the polling relay's
// does.
func TestFailureOfAnUnseenRowIsKept(t *testing.T) {
	e := newEnv(t)
	db := &unseenFirst{Database: postgres.NewDriver(e.pg.Pool).CDC()}
	cfg := e.config()
	cfg.MaxAttempts, cfg.Backoff = 3, relay.Backoff{Initial: 20 * time.Millisecond, Max: 20 * time.Millisecond}
	r, err := cdc.New(db, e.pub, cfg)
	testenv.Must(t, err, "new relay")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	e.eventually(func() bool { return reads(r) }, "the relay does not read its slot")

	poison := msg("p", "p1")
	e.pub.Fail(poison.ID, -1)
	e.write(poison, msg("p", "p2"))
	e.eventually(func() bool { return len(e.pub.Messages()) == 1 && e.count("courier_outbox") == 0 }, "not settled")
	got := e.deadLetters()
	if want := []deadLetter{{"p1", 3, 3, true}}; len(got) != 1 || got[0] != want[0] {
		t.Fatalf("dead letters %+v, want %+v: the first failure's history or attempt was lost", got, want)
	}
}
