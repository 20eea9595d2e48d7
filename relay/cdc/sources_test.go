package cdc_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/memory"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/postgres"
)

// A source is one of the two relays, on the test's database: start runs one
// until stop is called.
type source struct {
	name  string
	start func(e *env, pub broker.Publisher, maxAttempts int, backoff relay.Backoff) (stop func())
}

var sources = []source{
	{"polling", func(e *env, pub broker.Publisher, maxAttempts int, backoff relay.Backoff) func() {
		st, err := postgres.NewDriver(e.pg.Pool).RelayStore(context.Background(), store.RelayConfig{})
		testenv.Must(e.t, err, "store")
		r, err := relay.New(st, pub, relay.Config{BatchSize: 100, MaxAttempts: maxAttempts, Backoff: backoff, PollInterval: 10 * time.Millisecond,
			LeaseDuration: 5 * time.Second, Logger: e.config().Logger})
		testenv.Must(e.t, err, "relay")
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		return func() { cancel(); <-done }
	}},
	{"cdc", func(e *env, pub broker.Publisher, maxAttempts int, backoff relay.Backoff) func() {
		cfg := e.config()
		cfg.MaxAttempts, cfg.Backoff = maxAttempts, backoff
		_, stop := e.startMade(pub, cfg)
		return stop
	}},
}

// timed wraps the memory publisher: it notes when each message was tried,
// and turns its outages into ones that say when to come back (Retry-After)
// while wish is set.
type timed struct {
	*memory.Publisher
	mu    sync.Mutex
	tries map[[16]byte][]time.Time
	wish  time.Duration
}

type retryAfter struct {
	error
	d time.Duration
}

func (e retryAfter) RetryAfter() time.Duration { return e.d }
func (e retryAfter) Unwrap() error             { return e.error }

func (p *timed) Publish(ctx context.Context, msgs []courier.Message) []error {
	errs := p.Publisher.Publish(ctx, msgs)
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	for i, m := range msgs {
		p.tries[m.ID] = append(p.tries[m.ID], now)
		if p.wish > 0 && errors.Is(errs[i], broker.ErrUnavailable) {
			errs[i] = retryAfter{errs[i], p.wish}
		}
	}
	return errs
}

func (p *timed) triesOf(id [16]byte) []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.tries[id])
}

// deadLetter is what a scenario compares of a dead letter.
type deadLetter struct {
	Payload  string
	Attempts int
	History  int
	HasError bool
}

// The failure rules are one policy (relay/internal/dispatch): a scenario
// run on the polling relay and on the CDC relay ends the same way, in the
// same order, with the same dead letters, attempts and histories.
func TestSourcesFailTheSameWay(t *testing.T) {
	slow := relay.Backoff{Initial: 10 * time.Second, Max: 10 * time.Second}
	quick := relay.Backoff{Initial: 20 * time.Millisecond, Max: 20 * time.Millisecond}
	type outcome struct {
		Published []string
		Dead      []deadLetter
		Tries     map[string]int
	}
	scenarios := []struct {
		name string
		want outcome
		run  func(t *testing.T, e *env, s source, pub *timed) []courier.Message
	}{
		{"poison message", outcome{Published: []string{"o1", "p2"}, Dead: []deadLetter{{"p1", 3, 3, true}}, Tries: map[string]int{"p1": 3, "p2": 1, "o1": 1}},
			func(t *testing.T, e *env, s source, pub *timed) []courier.Message {
				msgs := []courier.Message{msg("p", "p1"), msg("p", "p2"), msg("o", "o1")}
				pub.Fail(msgs[0].ID, -1)
				defer s.start(e, pub, 3, quick)()
				e.write(msgs...)
				e.eventually(func() bool { return len(e.pub.Messages()) == 2 && e.count("courier_outbox") == 0 }, "not settled")
				return msgs
			}},
		{"permanent rejection", outcome{Published: []string{"r2"}, Dead: []deadLetter{{"r1", 1, 1, true}}, Tries: map[string]int{"r1": 1, "r2": 1}},
			func(t *testing.T, e *env, s source, pub *timed) []courier.Message {
				msgs := []courier.Message{msg("r", "r1"), msg("r", "r2")}
				pub.Reject(msgs[0].ID, "larger than max_payload")
				defer s.start(e, pub, 3, slow)()
				e.write(msgs...)
				e.eventually(func() bool { return len(e.pub.Messages()) == 1 && e.count("courier_outbox") == 0 }, "not settled")
				return msgs
			}},
		{"outage", outcome{Published: []string{"a1", "a2"}, Tries: map[string]int{"a1": 2, "a2": 1}},
			func(t *testing.T, e *env, s source, pub *timed) []courier.Message {
				msgs := []courier.Message{msg("a", "a1"), msg("a", "a2")}
				pub.FailNext(1)
				defer s.start(e, pub, 1, quick)()
				e.write(msgs...)
				e.eventually(func() bool { return len(e.pub.Messages()) == 2 }, "not published")
				return msgs
			}},
		{"outage with Retry-After", outcome{Published: []string{"w1"}, Tries: map[string]int{"w1": 2}},
			func(t *testing.T, e *env, s source, pub *timed) []courier.Message {
				msgs := []courier.Message{msg("w", "w1")}
				pub.FailNext(1)
				pub.wish = 300 * time.Millisecond
				defer s.start(e, pub, 1, slow)()
				e.write(msgs...)
				e.eventually(func() bool { return len(e.pub.Messages()) == 1 }, "not published")
				tries := pub.triesOf(msgs[0].ID)
				if gap := tries[1].Sub(tries[0]); gap < pub.wish || gap >= slow.Initial {
					t.Fatalf("tried again after %s: want the broker's wish (%s), not the backoff (%s)", gap, pub.wish, slow.Initial)
				}
				return msgs
			}},
		{"restart mid-retry", outcome{Published: []string{"m2"}, Dead: []deadLetter{{"m1", 3, 3, true}}, Tries: map[string]int{"m1": 3, "m2": 1}},
			func(t *testing.T, e *env, s source, pub *timed) []courier.Message {
				msgs := []courier.Message{msg("m", "m1"), msg("m", "m2")}
				pub.Fail(msgs[0].ID, -1)
				stop := s.start(e, pub, 3, relay.Backoff{Initial: 100 * time.Millisecond, Max: 100 * time.Millisecond})
				e.write(msgs...)
				e.eventually(func() bool { return e.stored("courier_outbox", msgs[0].ID) == 2 }, "two failures not recorded")
				stop() // after two counted failures of three
				defer s.start(e, pub, 3, quick)()
				e.eventually(func() bool { return len(e.pub.Messages()) == 1 && e.count("courier_outbox") == 0 }, "not settled")
				return msgs
			}},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			for _, s := range sources {
				t.Run(s.name, func(t *testing.T) {
					e := newEnv(t)
					pub := &timed{Publisher: e.pub, tries: map[[16]byte][]time.Time{}}
					msgs := sc.run(t, e, s, pub)
					got := outcome{Tries: map[string]int{}}
					for _, m := range e.pub.Messages() {
						got.Published = append(got.Published, string(m.Payload))
					}
					for _, m := range msgs {
						got.Tries[string(m.Payload)] = e.pub.Attempts(m.ID)
					}
					got.Dead = e.deadLetters()
					if fmt.Sprint(got) != fmt.Sprint(sc.want) {
						t.Fatalf("%s: got %+v, want %+v", s.name, got, sc.want)
					}
				})
			}
		})
	}
}

// deadLetters returns the test's dead letters, oldest first.
func (e *env) deadLetters() []deadLetter {
	e.t.Helper()
	rows, err := e.pg.Pool.Query(context.Background(), `SELECT convert_from(payload, 'UTF8'), attempts, jsonb_array_length(coalesce(history, '[]')), last_error <> ''
FROM courier_outbox_dead_letters ORDER BY id`)
	testenv.Must(e.t, err, "dead letters")
	got, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (deadLetter, error) {
		var d deadLetter
		return d, row.Scan(&d.Payload, &d.Attempts, &d.History, &d.HasError)
	})
	testenv.Must(e.t, err, "dead letters")
	return got
}
