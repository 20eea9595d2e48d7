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
	made map[int]int // consumers made per partition, for their names
}

// startPartitions makes or checks the partition stream, joins the
// consumer's group and starts taking its share of the partitions.
func startPartitions(ctx context.Context, nc *natsgo.Conn, js jetstream.JetStream, cfg SubscriberConfig) (*partitions, error) {
	if v := nc.ConnectedServerVersion(); !serverAtLeast(v, 10) {
		return nil, fmt.Errorf("nats: SubscriberConfig.Partitions needs nats-server 2.10 or later (stream sources with subject transforms), and the server is %s: upgrade it, or run one instance of the consumer (KeepOrder keeps a key's order inside it)", v)
	}
	p := &partitions{
		cfg: cfg, js: js, nc: nc, stream: PartitionStream(cfg.Stream, cfg.Consumer),
		out: make(chan *delivery), held: make(map[int]*held), made: make(map[int]int), done: make(chan struct{}),
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
