package main

import (
	"log"
	"os"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/relay"
)

// slowCalls is a relay.Observer that logs the relay's broker calls that
// took at least over (see BENCH_SLOW_CALLS in README.md).
type slowCalls struct {
	relay.NopObserver
	over time.Duration
	name string
}

// slowCallObserver returns, when BENCH_SLOW_CALLS holds a duration, an
// Observer that logs the broker calls of the relay called name that took
// at least that long; else nil.
func slowCallObserver(name string) relay.Observer {
	d, err := time.ParseDuration(os.Getenv("BENCH_SLOW_CALLS"))
	if err != nil || d <= 0 {
		return nil
	}
	return slowCalls{over: d, name: name}
}

// Published implements relay.Observer.
func (s slowCalls) Published(msgs []courier.Message, errs []error, d time.Duration) {
	if d >= s.over {
		keys := map[string]bool{}
		for _, m := range msgs {
			keys[m.Key] = true
		}
		log.Printf("SLOWCALL %s %s end=%s msgs=%d keys=%d", s.name, d, time.Now().Format("15:04:05.000000"), len(msgs), len(keys))
	}
}
