package nats_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	couriernats "github.com/courier-go/courier/broker/nats"
)

// rounds publishes messages through a Publisher the way the relay hands
// them to it (relay/doc.go, Ordering; relay/internal/dispatch.Round): each
// call sends every key's next message, or, when the publisher keeps a
// key's order (broker.OrderKeeper), the key's pending run; a message that
// failed stays at the head of its key, and nothing of the key after it
// counts as published until it is. So the broker must hold each key's
// messages in write order, whatever the acknowledgements said in between.
type rounds struct {
	pub  *couriernats.Publisher
	runs bool // hand a key's pending run at once (the publisher keeps key order)
	// most is the most messages per call (the relay's batch).
	most int
	// keys is the number of keys the messages are spread over, round
	// robin.
	keys int
	// topic is the messages' topic.
	topic string
}

// roundsOutcome is what rounds.publish saw.
type roundsOutcome struct {
	// written are the messages in the order they were written.
	written []courier.Message
	// acked are the messages in the order the publisher acknowledged them:
	// not write order when an acknowledgement was lost and the message
	// was acknowledged on a later call (a duplicate), after later ones.
	acked   []courier.Message
	failed  int
	byError map[string]int // failed publishes by error text, ids and numbers blanked
	wrong   []error        // errors that are not (only) broker.ErrUnavailable
	// broken lists the calls in which a message was acknowledged after an
	// earlier message of its key in the same call failed: a publisher that
	// keeps key order must fail it too (broker.OrderKeeper).
	broken []string
}

var digits = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f-]{27}|[0-9]+`)

func (o roundsOutcome) summary() string {
	lines := make([]string, 0, len(o.byError))
	for e, n := range o.byError {
		lines = append(lines, fmt.Sprintf("  %6d  %s", n, e))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// publish writes total messages, at most r.most pending at a time, and
// publishes them in rounds until every one is acknowledged or ctx ends.
// progress counts the messages acknowledged.
func (r rounds) publish(ctx context.Context, total int, progress *atomic.Int64) roundsOutcome {
	out := roundsOutcome{byError: map[string]int{}}
	pending := make([][]courier.Message, r.keys) // by key, in write order
	waiting := 0
	for len(out.acked) < total && ctx.Err() == nil {
		for waiting < r.most && len(out.written) < total {
			k := len(out.written) % r.keys
			m := courier.NewMessage(r.topic, fmt.Sprintf("k%d", k), "T", fmt.Appendf(nil, "%d", len(out.written)))
			out.written = append(out.written, m)
			pending[k] = append(pending[k], m)
			waiting++
		}
		var call []courier.Message
		sent := make([]int, r.keys)
		for k, msgs := range pending {
			n := min(len(msgs), 1, r.most-len(call))
			if r.runs {
				n = min(len(msgs), r.most-len(call))
			}
			call = append(call, msgs[:n]...)
			sent[k] = n
		}
		errs := r.pub.Publish(ctx, call)
		ok := r.judge(&out, call, errs, pending, sent, progress)
		waiting -= ok
		if ok == 0 {
			time.Sleep(50 * time.Millisecond) // the relay's pause in an outage
		}
	}
	return out
}

// judge records a call's outcome, key by key: the messages acknowledged
// before the key's first failure leave pending[k]; the failed one and
// the rest stay. It returns how many left.
func (r rounds) judge(out *roundsOutcome, call []courier.Message, errs []error, pending [][]courier.Message, sent []int, progress *atomic.Int64) int {
	left, j := 0, 0
	for k := range pending {
		done, failed := 0, false
		for i := range sent[k] {
			err := errs[j+i]
			switch {
			case err == nil && failed:
				out.broken = append(out.broken, fmt.Sprintf("message %d of key %s acknowledged after message %d failed in the same call",
					i, call[j+i].Key, done))
			case err == nil:
				out.acked = append(out.acked, call[j+i])
				progress.Add(1)
				done++
			case !failed:
				failed = true
				out.failed++
				out.byError[digits.ReplaceAllString(err.Error(), "#")]++
				if !errors.Is(err, broker.ErrUnavailable) || errors.Is(err, couriernats.ErrNoStream) || errors.Is(err, broker.ErrRejected) {
					out.wrong = append(out.wrong, err)
				}
			}
		}
		j += sent[k]
		pending[k] = slices.Delete(pending[k], 0, done)
		left += done
	}
	return left
}
