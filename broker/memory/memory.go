package memory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
)

// ErrOutage is the cause of the outages the Publisher simulates; the errors
// it returns wrap it and [broker.ErrUnavailable].
var ErrOutage = errors.New("memory: broker down")

// Publisher is a [broker.Publisher] in memory. It is safe for concurrent
// use. The zero value is not usable; call [NewPublisher].
type Publisher struct {
	mu       sync.Mutex
	acked    []broker.Stored // Log "memory", Offset counting from 0
	calls    [][]courier.Message
	attempts map[uuid.UUID]int
	offset   int64            // of the next message acknowledged
	now      func() time.Time // stamps what is acknowledged
	failNext int              // messages left to fail as an outage
	down     bool             // every message fails as an outage
	rejected map[uuid.UUID]error
	failing  map[uuid.UUID]int // counted failures left per message; <0: for ever
	ordered  bool              // KeepsKeyOrder
	gate     chan struct{}     // non-nil: publishes wait for it to close
	held     chan struct{}     // a value per publish that starts waiting
}

var (
	_ broker.Publisher = (*Publisher)(nil)
	_ broker.Reader    = (*Publisher)(nil)
)

// NewPublisher returns a Publisher that acknowledges every message.
func NewPublisher() *Publisher {
	return &Publisher{
		attempts: make(map[uuid.UUID]int),
		rejected: make(map[uuid.UUID]error),
		failing:  make(map[uuid.UUID]int),
		held:     make(chan struct{}, 1024),
		now:      time.Now,
	}
}

// SetClock makes the Publisher stamp what it acknowledges with now's time
// (ReadBack's Stored.At) instead of time.Now's.
func (p *Publisher) SetClock(now func() time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.now = now
}

// Publish implements [broker.Publisher]. While the Publisher is held it
// first waits for Release; a context that ends meanwhile fails every message
// as an outage. Then each message, in order, meets the faults set up: an
// outage (Down, FailNext), a permanent refusal (Reject), a counted failure
// (Fail); otherwise it is acknowledged and kept.
func (p *Publisher) Publish(ctx context.Context, msgs []courier.Message) []error {
	errs := make([]error, len(msgs))
	p.mu.Lock()
	p.calls = append(p.calls, slices.Clone(msgs))
	gate := p.gate
	p.mu.Unlock()
	if gate != nil {
		select {
		case p.held <- struct{}{}:
		default:
		}
		select {
		case <-gate:
		case <-ctx.Done():
			for i := range errs {
				errs[i] = broker.Unavailable(fmt.Errorf("memory: publish held until the context ended: %w", ctx.Err()))
			}
			p.count(msgs)
			return errs
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	type topicKey struct{ topic, key string }
	var failed map[topicKey]error // ordered: the keys that failed in this call
	for i, m := range msgs {
		p.attempts[m.ID]++
		if err, ok := failed[topicKey{m.Topic, m.Key}]; ok {
			errs[i] = broker.Unavailable(fmt.Errorf("memory: not stored: an earlier message of key %q failed: %w", m.Key, err))
			continue
		}
		errs[i] = p.fault(m)
		if errs[i] == nil {
			p.acked = append(p.acked, broker.Stored{Message: m, At: p.now(), Log: "memory", Offset: p.offset})
			p.offset++
			continue
		}
		if p.ordered && !broker.Permanent(errs[i]) {
			if failed == nil {
				failed = make(map[topicKey]error)
			}
			failed[topicKey{m.Topic, m.Key}] = errs[i]
		}
	}
	return errs
}

// ReadBack implements [broker.Reader]: the messages acknowledged at or
// after from and before to, in the order they were acknowledged, in one
// log, "memory", whose offsets count the messages acknowledged from 0. It
// keeps everything but what Forget removed, so since is always zero.
func (p *Publisher) ReadBack(ctx context.Context, from, to time.Time, fn func(broker.Stored) error) (time.Time, error) {
	p.mu.Lock()
	var stored []broker.Stored
	for _, s := range p.acked {
		if !s.At.Before(from) && s.At.Before(to) {
			stored = append(stored, s)
		}
	}
	p.mu.Unlock()
	for _, s := range stored {
		if err := ctx.Err(); err != nil {
			return time.Time{}, err
		}
		if err := fn(s); err != nil {
			return time.Time{}, err
		}
	}
	return time.Time{}, nil
}

// Forget removes every acknowledged copy of message id, as a broker that
// lost what it had acknowledged would, and reports how many it removed.
func (p *Publisher) Forget(id uuid.UUID) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	p.acked = slices.DeleteFunc(p.acked, func(s broker.Stored) bool {
		if s.Message.ID == id {
			n++
		}
		return s.Message.ID == id
	})
	return n
}

// KeepOrder makes the Publisher implement [broker.OrderKeeper]'s promise
// (true) or not (false, the default): within one Publish call, a message
// that fails other than for good (Reject) fails the later messages of its
// topic and key too, so a relay may hand it a key's messages pipelined.
func (p *Publisher) KeepOrder(keep bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ordered = keep
}

// KeepsKeyOrder implements [broker.OrderKeeper]: what KeepOrder set.
func (p *Publisher) KeepsKeyOrder() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ordered
}

// count records an attempt of each message.
func (p *Publisher) count(msgs []courier.Message) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		p.attempts[m.ID]++
	}
}

// fault returns the error m meets, nil if none. p.mu is held.
func (p *Publisher) fault(m courier.Message) error {
	switch {
	case p.down:
		return broker.Unavailable(ErrOutage)
	case p.failNext > 0:
		p.failNext--
		return broker.Unavailable(ErrOutage)
	}
	if err, ok := p.rejected[m.ID]; ok {
		return broker.Rejected(err)
	}
	if n, ok := p.failing[m.ID]; ok {
		switch {
		case n > 0:
			p.failing[m.ID] = n - 1
		case n == 0:
			delete(p.failing, m.ID)
			return nil
		}
		return fmt.Errorf("memory: message %s refused", m.ID)
	}
	return nil
}

// Down starts (true) or ends (false) an outage: every message fails with an
// error wrapping [broker.ErrUnavailable] until it ends.
func (p *Publisher) Down(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
}

// FailNext makes the next n messages fail as an outage
// ([broker.ErrUnavailable]).
func (p *Publisher) FailNext(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failNext = n
}

// Reject makes every publish of message id fail for good, with an error
// wrapping [broker.ErrRejected] and reason.
func (p *Publisher) Reject(id uuid.UUID, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rejected[id] = errors.New(reason)
}

// Fail makes the next n publishes of message id fail with an error that
// counts against it (neither unavailable nor rejected); n < 0 fails them
// all.
func (p *Publisher) Fail(id uuid.UUID, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n < 0 {
		p.failing[id] = -1
		return
	}
	p.failing[id] = n
}

// Hold makes publishes wait, before any message is handled, until Release
// or their context ends. [Publisher.Held] tells when one has started
// waiting.
func (p *Publisher) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate == nil {
		p.gate = make(chan struct{})
	}
}

// Release lets the held publishes go on, and the later ones go through.
func (p *Publisher) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate != nil {
		close(p.gate)
		p.gate = nil
	}
}

// Held receives a value each time a publish starts waiting while the
// Publisher is held (values beyond 1024 unread ones are dropped).
func (p *Publisher) Held() <-chan struct{} { return p.held }

// Messages returns the acknowledged messages in the order they were
// acknowledged, duplicates included.
func (p *Publisher) Messages() []courier.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	msgs := make([]courier.Message, len(p.acked))
	for i, s := range p.acked {
		msgs[i] = s.Message
	}
	return msgs
}

// Calls returns the messages of each Publish call, in call order,
// whatever became of them.
func (p *Publisher) Calls() [][]courier.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([][]courier.Message, len(p.calls))
	for i, c := range p.calls {
		out[i] = slices.Clone(c)
	}
	return out
}

// Attempts returns how many times message id was handed to Publish.
func (p *Publisher) Attempts(id uuid.UUID) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.attempts[id]
}
