package nats

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier/broker/internal/group"
)

// held is a partition an instance consumes: its consumer on the partition
// stream, the pull from that consumer, and the pump that hands what the
// pull receives on to Next. The pump hands nothing on past a gap in the
// consumer's delivery sequence: it makes the consumer again instead (see
// the package documentation, Key partitions, for why gaps happen).
type held struct {
	part    int
	pump    *group.Pump
	checked time.Time     // when its consumer was last seen to exist
	last    atomic.Uint64 // the stream sequence of the last message handed out

	mu      sync.Mutex
	name    string                    // its consumer
	iter    jetstream.MessagesContext // the pull from it
	stopped bool                      // the pump is stopping: pull no more

	next uint64 // the consumer sequence the pump expects next; the pump's own
}

// consumerName is the consumer of partition part held by member; n counts
// the consumers this member made of the partition before: "p3-web-1-ab"
// first, then "p3-web-1-ab_1", … (member ids hold no "_").
func consumerName(part int, member string, n int) string {
	name := "p" + strconv.Itoa(part) + "-" + member
	if n > 0 {
		name += "_" + strconv.Itoa(n)
	}
	return name
}

// consumerMember returns the member whose consumer of part name is, and
// whether it is one of Courier's.
func consumerMember(part int, name string) (string, bool) {
	member, ok := strings.CutPrefix(name, "p"+strconv.Itoa(part)+"-")
	member, _, _ = strings.Cut(member, "_")
	return member, ok && group.ValidMember(member)
}

// newConsumerName returns the name of the next consumer this member makes
// of part.
func (p *partitions) newConsumerName(part int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.made[part]
	p.made[part]++
	return consumerName(part, p.group.Member(), n)
}

// partitionPullHeartbeat is how often the server signals that a pending
// pull of a partition is alive: 2s (see pullHeartbeat), or two fifths of
// MemberTimeout when that is shorter, at least 500ms (nats.go's least), so
// that a pull that stalls is pulled again at the same point of a member's
// timeout whatever the timeout.
func (c *SubscriberConfig) partitionPullHeartbeat() time.Duration {
	return max(500*time.Millisecond, min(pullHeartbeat, c.MemberTimeout*2/5))
}

// consume creates (or updates) the consumer name of part. JetStream
// refuses it (errCodeWQNotUnique) while another consumer filters the
// partition.
func (p *partitions) consume(ctx context.Context, part int, name string) (jetstream.Consumer, error) {
	return p.js.CreateOrUpdateConsumer(ctx, p.stream, jetstream.ConsumerConfig{
		Durable:       name,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       p.cfg.AckWait,
		MaxAckPending: p.cfg.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		FilterSubject: strconv.Itoa(part) + ".>",
		// A consumer whose member died and whose partition nobody took
		// (fewer partitions wanted) goes by itself.
		InactiveThreshold: max(10*p.cfg.MemberTimeout, time.Minute),
	})
}

// pull makes cons, named name, h's consumer (the one Release and the next
// restart delete) and starts pulling from it: what it receives first is
// the delivery after those cons made before, and nothing of cons was
// handed out yet.
func (p *partitions) pull(h *held, cons jetstream.Consumer, name string) error {
	h.mu.Lock()
	h.name = name
	h.mu.Unlock()
	iter, err := cons.Messages(jetstream.PullMaxMessages(p.cfg.Prefetch), jetstream.PullHeartbeat(p.cfg.partitionPullHeartbeat()))
	if err != nil {
		return fmt.Errorf("nats: pull from consumer %s: %w", name, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		iter.Stop()
		return errPumpStopped
	}
	h.iter, h.next = iter, cons.CachedInfo().Delivered.Consumer+1
	h.last.Store(0)
	return nil
}

// errPumpStopped ends a partition's pump that was stopping while it made a
// new consumer.
var errPumpStopped = errors.New("nats: partition given up")

// consumer returns the name of h's consumer now.
func (h *held) consumer() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.name
}

// Acquire implements group.Owner: it creates this member's consumer of the
// partition and pulls from it. While another member's consumer holds the
// partition it returns group.ErrBusy, unless that member is gone: then it
// deletes that consumer first.
func (p *partitions) Acquire(ctx context.Context, part int, alive func(string) bool) error {
	if p.holding(ctx, part) {
		return nil
	}
	name := p.newConsumerName(part)
	cons, err := p.consume(ctx, part, name)
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeWQNotUnique {
		if err := p.takeFrom(ctx, part, name, alive); err != nil {
			return err
		}
		cons, err = p.consume(ctx, part, name)
	}
	if err != nil {
		return fmt.Errorf("nats: consumer %s of partition %d on stream %s: %w", name, part, p.stream, err)
	}
	h := &held{part: part, checked: time.Now()}
	if err := p.pull(h, cons, name); err != nil {
		return err
	}
	h.pump = group.StartPump(p.receive(h), func(m jetstream.Msg, t *group.Ticket) *delivery {
		d := &delivery{m: m, subject: m.Subject(), ticket: t}
		if _, rest, ok := strings.Cut(d.subject, "."); ok {
			d.subject = rest // without the partition
		}
		if md, err := m.Metadata(); err == nil {
			h.last.Store(md.Sequence.Stream)
		}
		return d
	}, p.out)
	p.mu.Lock()
	p.held[part] = h
	p.mu.Unlock()
	return nil
}

// receive returns what pulls h's messages for its pump: each delivery
// that follows the one before, and, after one that does not, the
// deliveries of a new consumer (see held).
func (p *partitions) receive(h *held) func(stop <-chan struct{}) (jetstream.Msg, error) {
	return func(stop <-chan struct{}) (jetstream.Msg, error) {
		for {
			h.mu.Lock()
			iter := h.iter
			h.mu.Unlock()
			m, err := iter.Next()
			switch {
			case err == nil && p.follows(h, m):
				return m, nil
			case err == nil:
				if err := p.restart(h, iter, stop); err != nil {
					return nil, err
				}
				continue
			case errors.Is(err, jetstream.ErrMsgIteratorClosed):
				return nil, err
			case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound):
				return nil, group.ErrLost
			}
			p.log.Warn("nats: pulling a partition failed; pulling again", "partition", h.part, "error", err)
			select {
			case <-stop:
				return nil, err
			case <-time.After(pullRetry):
			}
		}
	}
}

// pullRetry spaces the pulls of a partition after one failed.
const pullRetry = 100 * time.Millisecond

// follows reports whether m is the delivery h's consumer made after the
// one the pump received before, and counts it received.
func (p *partitions) follows(h *held, m jetstream.Msg) bool {
	md, err := m.Metadata()
	if err == nil && md.Sequence.Consumer == h.next {
		h.next++
		return true
	}
	var got any = err
	if err == nil {
		got = md.Sequence.Consumer
	}
	p.log.Warn("nats: deliveries of a partition went missing (dropped by the client as a slow consumer, or lost with the connection); pulling the partition again from its oldest message not acknowledged",
		"partition", h.part, "consumer", h.consumer(), "expected_delivery", h.next, "received", got)
	return false
}

// restart replaces h's consumer, whose pull iter missed deliveries, with a
// new one, which starts at the partition's oldest message not
// acknowledged. It returns group.ErrLost when another member's consumer
// took the partition meanwhile, and an error once stop is closed.
func (p *partitions) restart(h *held, iter jetstream.MessagesContext, stop <-chan struct{}) error {
	iter.Stop()
	for {
		err := p.replace(h)
		if err == nil || errors.Is(err, group.ErrLost) || errors.Is(err, errPumpStopped) {
			return err
		}
		p.log.Warn("nats: could not make a partition's consumer again; trying again", "partition", h.part, "error", err)
		select {
		case <-stop:
			return err
		case <-time.After(pullRetry):
		}
	}
}

// replace deletes h's consumer, makes a new one and pulls from it.
func (p *partitions) replace(h *held) error {
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.MemberTimeout)
	defer cancel()
	old := h.consumer()
	if err := p.js.DeleteConsumer(ctx, p.stream, old); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("nats: delete consumer %s: %w", old, err)
	}
	name := p.newConsumerName(h.part)
	cons, err := p.consume(ctx, h.part, name)
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeWQNotUnique {
		return fmt.Errorf("nats: partition %d was taken while this member made its consumer again: %w", h.part, group.ErrLost)
	}
	if err != nil {
		return fmt.Errorf("nats: consumer %s of partition %d on stream %s: %w", name, h.part, p.stream, err)
	}
	return p.pull(h, cons, name)
}

// holding reports whether this member consumes part and still may: a
// partition whose consumer is gone (another member deleted it, having
// found this one silent) is let go of. That the consumer exists is checked
// once every MemberTimeout.
func (p *partitions) holding(ctx context.Context, part int) bool {
	p.mu.Lock()
	h := p.held[part]
	p.mu.Unlock()
	if h == nil {
		return false
	}
	if !h.pump.Lost() && time.Since(h.checked) >= p.cfg.MemberTimeout {
		_, err := p.js.Consumer(ctx, p.stream, h.consumer())
		switch {
		case errors.Is(err, jetstream.ErrConsumerNotFound):
			h.pump.MarkLost()
		case err == nil:
			h.checked = time.Now()
		}
	}
	if !h.pump.Lost() {
		return true
	}
	p.log.Info("nats: a partition was taken from this member", "partition", part)
	p.stopPump(part, h)
	return false
}

// takeFrom deletes the consumer that holds part, when its member is gone
// or is this one (a consumer it made before and could not delete); it
// returns group.ErrBusy when that member is alive.
func (p *partitions) takeFrom(ctx context.Context, part int, ours string, alive func(string) bool) error {
	s, err := p.js.Stream(ctx, p.stream)
	if err != nil {
		return fmt.Errorf("nats: look up stream %s: %w", p.stream, err)
	}
	filter := strconv.Itoa(part) + ".>"
	holder := ""
	consumers := s.ListConsumers(ctx)
	for ci := range consumers.Info() {
		if ci.Name != ours && (ci.Config.FilterSubject == filter || slices.Contains(ci.Config.FilterSubjects, filter)) {
			holder = ci.Name
		}
	}
	if err := consumers.Err(); err != nil {
		return fmt.Errorf("nats: list the consumers of stream %s: %w", p.stream, err)
	}
	if holder == "" {
		return nil // gone meanwhile
	}
	member, ok := consumerMember(part, holder)
	switch {
	case !ok:
		return fmt.Errorf("nats: consumer %s on stream %s holds partition %d and is not Courier's: delete it, the stream is Courier's", holder, p.stream, part)
	case member == p.group.Member():
		p.log.Info("nats: deleting a consumer of this member's left over", "partition", part, "consumer", holder)
	case alive(member):
		return fmt.Errorf("partition %d: consumer %s: %w", part, holder, group.ErrBusy)
	default:
		p.log.Info("nats: taking a partition from a member gone silent", "partition", part, "from", member)
	}
	if err := p.js.DeleteConsumer(ctx, p.stream, holder); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("nats: delete consumer %s of member %s: %w", holder, member, err)
	}
	return nil
}

// stopPump stops h's pulling and forgets it; what it received and did not
// hand over goes back with its consumer.
func (p *partitions) stopPump(part int, h *held) {
	h.mu.Lock()
	h.stopped = true
	iter := h.iter
	h.mu.Unlock()
	iter.Stop()
	h.pump.Stop()
	p.mu.Lock()
	if p.held[part] == h {
		delete(p.held, part)
	}
	p.mu.Unlock()
}

// Release implements group.Owner: it stops pulling part, waits, with
// drain (at most MemberTimeout), for the deliveries handed out to be
// settled and their acknowledgements to reach the server, and deletes this
// member's consumer of the partition, so that the next owner's consumer
// starts at the oldest message not acknowledged. Without drain (the
// subscriber closes) it does not wait for deliveries still unsettled, but
// when none is, it still waits for the server to have the acknowledgements
// sent: acknowledgements are not answered, and the server may take them
// after the consumer's deletion, which would bring their messages again.
// Deliveries that outlast the wait come again to the next owner, which
// skips those applied.
func (p *partitions) Release(ctx context.Context, part int, drain bool) {
	p.mu.Lock()
	h := p.held[part]
	p.mu.Unlock()
	if h == nil {
		return
	}
	p.stopPump(part, h)
	wait := p.cfg.MemberTimeout
	if !drain {
		wait = 0 // only what is settled already
	}
	name := h.consumer()
	p.drain(ctx, h, name, wait)
	if err := p.js.DeleteConsumer(ctx, p.stream, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		p.log.Warn("nats: could not delete the consumer of a partition given up; the partition's next owner takes it over once this member is gone, or the server drops it a minute or more after its last pull", "partition", part, "consumer", name, "error", err)
	}
}

// drain waits, up to settle, until h's deliveries are settled, and then,
// at most MemberTimeout in all, until the server has their
// acknowledgements (the acknowledgement floor of h's consumer, name, has
// reached the last message handed out; what was pulled ahead and never
// handed out stays pending, for the next owner): a handover then brings
// nothing again.
func (p *partitions) drain(ctx context.Context, h *held, name string, settle time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.MemberTimeout)
	defer cancel()
	if !h.pump.Drain(ctx, settle) {
		return
	}
	for {
		c, err := p.js.Consumer(ctx, p.stream, name)
		if err != nil || c.CachedInfo().AckFloor.Stream >= h.last.Load() {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(ackPoll):
		}
	}
}

// ackPoll spaces the looks at whether the server has a partition's
// acknowledgements.
const ackPoll = 5 * time.Millisecond
