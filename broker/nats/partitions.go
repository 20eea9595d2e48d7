package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/internal/group"
)

// PartitionStream returns the name of the stream that holds the key
// partitions of consumer on stream (SubscriberConfig.Partitions):
// "COURIER_KEYS_billing" for consumer "billing" of stream "COURIER".
func PartitionStream(stream, consumer string) string { return stream + "_KEYS_" + consumer }

// PartitionMark starts the description of every partition stream Courier
// makes (see PartitionStream): a stream that carries it is Courier's.
const PartitionMark = "courier: key partitions of consumer "

// groupSubject is the subject on which the instances of a consumer
// announce themselves: a subject no stream should capture.
func groupSubject(stream, consumer string) string { return "_COURIER.GROUP." + stream + "." + consumer }

// errCodeWQNotUnique is JetStream's "filtered consumer not unique on
// workqueue stream": another consumer holds the partition.
const errCodeWQNotUnique = 10100

// partitions is a Subscriber's share of its consumer's key partitions.
//
// The partition stream sources the subscription's topics from the stream,
// each message's subject prefixed with its key's partition by JetStream's
// partition() transform: "3.courier.orders.o-42". It is a work queue: a
// message stays until a consumer acknowledges it, and JetStream lets no two
// consumers filter the same subjects. Each partition an instance holds is
// a consumer of its own, "p3-<member>", filtering "3.>": taking a
// partition creates it, giving it up deletes it, so that its next owner's
// consumer starts at the oldest message not acknowledged.
type partitions struct {
	cfg    SubscriberConfig
	js     jetstream.JetStream
	nc     *natsgo.Conn
	stream string // the partition stream
	log    *slog.Logger
	group  *group.Group
	beats  *natsgo.Subscription
	out    chan *delivery // what the partitions held received, in order
	cancel context.CancelFunc
	done   chan struct{} // closed when the group has stopped

	mu   sync.Mutex
	held map[int]*held
}

// held is a partition an instance consumes.
type held struct {
	name    string // its consumer
	iter    jetstream.MessagesContext
	pump    *group.Pump
	checked time.Time     // when its consumer was last seen to exist
	last    atomic.Uint64 // the stream sequence of the last message handed out
}

// startPartitions makes or checks the partition stream, joins the
// consumer's group and starts taking its share of the partitions.
func startPartitions(ctx context.Context, nc *natsgo.Conn, js jetstream.JetStream, cfg SubscriberConfig) (*partitions, error) {
	if v := nc.ConnectedServerVersion(); !serverAtLeast(v, 10) {
		return nil, fmt.Errorf("nats: SubscriberConfig.Partitions needs nats-server 2.10 or later (stream sources with subject transforms), and the server is %s: upgrade it, or run one instance of the consumer (KeepOrder keeps a key's order inside it)", v)
	}
	p := &partitions{
		cfg: cfg, js: js, nc: nc, stream: PartitionStream(cfg.Stream, cfg.Consumer),
		out: make(chan *delivery), held: make(map[int]*held), done: make(chan struct{}),
	}
	if err := p.ensureStream(ctx); err != nil {
		return nil, err
	}
	g, err := group.New(cfg.groupConfig(), p.announce, p)
	if err != nil {
		return nil, err
	}
	p.group = g
	p.log = cfg.Logger.With("consumer", cfg.Consumer, "member", g.Member())
	p.beats, err = nc.Subscribe(groupSubject(cfg.Stream, cfg.Consumer), func(m *natsgo.Msg) { g.Heard(m.Data) })
	if err != nil {
		return nil, fmt.Errorf("nats: listen to the instances of consumer %s: %w", cfg.Consumer, err)
	}
	gctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go func() {
		defer close(p.done)
		_ = g.Run(gctx)
	}()
	p.log.Info("nats: sharing the consumer's keys", "stream", p.stream, "partitions", cfg.Partitions)
	return p, nil
}

// announce sends a beat of this member's to the group.
func (p *partitions) announce(ctx context.Context, b group.Beat) error {
	if err := p.nc.Publish(groupSubject(p.cfg.Stream, p.cfg.Consumer), b.Marshal()); err != nil {
		return err
	}
	if b.Leaving {
		return p.nc.FlushWithContext(ctx)
	}
	return nil
}

// next implements Subscriber.Next.
func (p *partitions) next(ctx context.Context) (broker.Delivery, error) {
	select {
	case d := <-p.out:
		return d, nil
	case <-p.done:
		return nil, broker.Unavailable(errors.New("nats: subscriber closed"))
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// close leaves the group: it gives up every partition held and tells the
// others.
func (p *partitions) close() {
	p.cancel()
	<-p.done
	_ = p.beats.Unsubscribe()
}

// ensureStream creates the partition stream, or checks that the one there
// is Courier's and made for this subscription's topics and partitions.
func (p *partitions) ensureStream(ctx context.Context) error {
	want, err := p.streamConfig(ctx)
	if err != nil {
		return err
	}
	s, err := p.js.Stream(ctx, p.stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := p.js.CreateStream(ctx, want); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return fmt.Errorf("nats: create stream %s for the key partitions of consumer %s: %w", p.stream, p.cfg.Consumer, err)
		}
		s, err = p.js.Stream(ctx, p.stream)
	}
	if err != nil {
		return fmt.Errorf("nats: look up stream %s: %w", p.stream, err)
	}
	have := s.CachedInfo().Config
	if !strings.HasPrefix(have.Description, PartitionMark) {
		return fmt.Errorf("nats: stream %s exists and Courier did not make it (its description is %q): it holds the key partitions of consumer %s only if Courier made it; rename or delete that stream, or name another consumer",
			p.stream, have.Description, p.cfg.Consumer)
	}
	if have.Description != want.Description || len(have.Sources) != 1 || have.Sources[0].Name != p.cfg.Stream ||
		!slices.Equal(have.Sources[0].SubjectTransforms, want.Sources[0].SubjectTransforms) {
		return fmt.Errorf("nats: stream %s was made as %q; this subscriber wants %q: every instance of consumer %s must agree on its Topics, Partitions and KeySubjects; to change them, let the old instances drain the stream, stop them and delete it (nats stream rm %s), or name another consumer",
			p.stream, have.Description, want.Description, p.cfg.Consumer, p.stream)
	}
	return nil
}

// streamConfig is the partition stream this subscription needs. It starts
// at the beginning of the stream, as a new durable consumer would, or after
// the messages a durable consumer of the same name acknowledged, so that
// switching a consumer to partitions does not bring back what it applied.
func (p *partitions) streamConfig(ctx context.Context) (jetstream.StreamConfig, error) {
	origin, err := p.js.Stream(ctx, p.cfg.Stream)
	if err != nil {
		return jetstream.StreamConfig{}, fmt.Errorf("nats: stream %s, which the consumer %s reads: %w", p.cfg.Stream, p.cfg.Consumer, err)
	}
	oc := origin.CachedInfo().Config
	src := &jetstream.StreamSource{Name: p.cfg.Stream}
	for _, t := range p.cfg.Topics {
		src.SubjectTransforms = append(src.SubjectTransforms, partitionTransform(p.cfg.Filter(t), p.cfg.Partitions))
	}
	if c, err := origin.Consumer(ctx, p.cfg.Consumer); err == nil {
		src.OptStartSeq = c.CachedInfo().AckFloor.Stream + 1
	}
	return jetstream.StreamConfig{
		Name: p.stream,
		Description: fmt.Sprintf("%s%s of stream %s, topics %s, in %d partitions", PartitionMark, p.cfg.Consumer, p.cfg.Stream,
			strings.Join(p.cfg.Topics, ","), p.cfg.Partitions),
		Retention: jetstream.WorkQueuePolicy,
		Storage:   oc.Storage,
		Replicas:  oc.Replicas,
		Sources:   []*jetstream.StreamSource{src},
	}, nil
}

// partitionTransform maps filter, a topic's subjects ending with the key's
// token, to the same subjects behind the partition of that token:
// "courier.orders.*" to "{{Partition(16,1)}}.courier.orders.{{Wildcard(1)}}".
func partitionTransform(filter string, partitions int) jetstream.SubjectTransformConfig {
	tokens := strings.Split(filter, ".")
	n := 0
	for i, tok := range tokens {
		if tok == "*" {
			n++
			tokens[i] = "{{Wildcard(" + strconv.Itoa(n) + ")}}"
		}
	}
	return jetstream.SubjectTransformConfig{
		Source:      filter,
		Destination: fmt.Sprintf("{{Partition(%d,%d)}}.%s", partitions, n, strings.Join(tokens, ".")),
	}
}

// consumerName is the consumer of partition part held by member.
func consumerName(part int, member string) string { return "p" + strconv.Itoa(part) + "-" + member }

// Acquire implements group.Owner: it creates this member's consumer of the
// partition and pulls from it. While another member's consumer holds the
// partition it returns group.ErrBusy, unless that member is gone: then it
// deletes that consumer first.
func (p *partitions) Acquire(ctx context.Context, part int, alive func(string) bool) error {
	if p.holding(ctx, part) {
		return nil
	}
	name := consumerName(part, p.group.Member())
	cc := jetstream.ConsumerConfig{
		Durable:       name,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       p.cfg.AckWait,
		MaxAckPending: p.cfg.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		FilterSubject: strconv.Itoa(part) + ".>",
		// A consumer whose member died and whose partition nobody took
		// (fewer partitions wanted) goes by itself.
		InactiveThreshold: max(10*p.cfg.MemberTimeout, time.Minute),
	}
	cons, err := p.js.CreateOrUpdateConsumer(ctx, p.stream, cc)
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeWQNotUnique {
		if err := p.takeFrom(ctx, part, name, alive); err != nil {
			return err
		}
		cons, err = p.js.CreateOrUpdateConsumer(ctx, p.stream, cc)
	}
	if err != nil {
		return fmt.Errorf("nats: consumer %s of partition %d on stream %s: %w", name, part, p.stream, err)
	}
	iter, err := cons.Messages(jetstream.PullMaxMessages(p.cfg.Prefetch), jetstream.PullHeartbeat(pullHeartbeat))
	if err != nil {
		return fmt.Errorf("nats: pull from consumer %s: %w", name, err)
	}
	h := &held{name: name, iter: iter, checked: time.Now()}
	h.pump = group.StartPump(p.receive(part, iter), func(m jetstream.Msg, t *group.Ticket) *delivery {
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

// receive returns what pulls part's messages from iter for its pump.
func (p *partitions) receive(part int, iter jetstream.MessagesContext) func(stop <-chan struct{}) (jetstream.Msg, error) {
	return func(stop <-chan struct{}) (jetstream.Msg, error) {
		for {
			m, err := iter.Next()
			switch {
			case err == nil:
				return m, nil
			case errors.Is(err, jetstream.ErrMsgIteratorClosed):
				return nil, err
			case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound):
				return nil, group.ErrLost
			}
			p.log.Warn("nats: pulling a partition failed; pulling again", "partition", part, "error", err)
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
		_, err := p.js.Consumer(ctx, p.stream, h.name)
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

// takeFrom deletes the consumer that holds part, when its member is gone;
// it returns group.ErrBusy when that member is alive.
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
	member, ok := strings.CutPrefix(holder, "p"+strconv.Itoa(part)+"-")
	if !ok {
		return fmt.Errorf("nats: consumer %s on stream %s holds partition %d and is not Courier's: delete it, the stream is Courier's", holder, p.stream, part)
	}
	if alive(member) {
		return fmt.Errorf("partition %d: consumer %s: %w", part, holder, group.ErrBusy)
	}
	p.log.Info("nats: taking a partition from a member gone silent", "partition", part, "from", member)
	if err := p.js.DeleteConsumer(ctx, p.stream, holder); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("nats: delete consumer %s of a member gone silent: %w", holder, err)
	}
	return nil
}

// stopPump stops h's pulling and forgets it; what it received and did not
// hand over goes back with its consumer.
func (p *partitions) stopPump(part int, h *held) {
	h.iter.Stop()
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
	p.drain(ctx, h, wait)
	if err := p.js.DeleteConsumer(ctx, p.stream, h.name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		p.log.Warn("nats: could not delete the consumer of a partition given up; the partition's next owner takes it over once this member is gone, or the server drops it a minute or more after its last pull", "partition", part, "consumer", h.name, "error", err)
	}
}

// drain waits, up to settle, until h's deliveries are settled, and then,
// at most MemberTimeout in all, until the server has their
// acknowledgements (its acknowledgement floor has reached the last message
// handed out; what was pulled ahead and never handed out stays pending,
// for the next owner): a handover then brings nothing again.
func (p *partitions) drain(ctx context.Context, h *held, settle time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.MemberTimeout)
	defer cancel()
	if !h.pump.Drain(ctx, settle) {
		return
	}
	for {
		c, err := p.js.Consumer(ctx, p.stream, h.name)
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
