package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
)

// Subscriber is a member of a Kafka consumer group. A new group starts at
// the earliest offset of each partition. Safe for concurrent use.
//
// Offsets are committed only for acknowledged (or dropped) records, and in
// order: Kafka keeps one committed offset per partition, so the Subscriber
// tracks, per partition, the records handed out and commits the offset after
// the last record of an unbroken run of acknowledged ones. A record not
// acknowledged holds back the commits of its partition (not the deliveries:
// Next goes on with the records after it), and comes again, with everything
// after it not yet committed, to whichever member owns the partition next:
// after Close, a crash, or a rebalance. Rebalances therefore lose nothing;
// they may bring acknowledged records again, which the inbox skips.
//
// Retry keeps the record in this process and hands it out again after the
// delay, without committing. Extend does nothing: Kafka has no
// acknowledgement deadline, a record stays with its member as long as the
// member stays in the group. Attempt is counted in memory per record by this
// Subscriber: a record that comes again after a restart or a rebalance
// starts at 1, so the inbox's own count of failed runs is what decides
// when to park.
type Subscriber struct {
	cl     *kgo.Client
	cfg    SubscriberConfig
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{} // closed when the poll loop is gone

	mu     sync.Mutex
	ready  []*delivery // handed out by Next, in order
	wake   chan struct{}
	room   chan struct{}
	parts  map[topicPartition]*partition
	timers map[*time.Timer]struct{}
	closed bool

	commitMu sync.Mutex // one commit at a time; held by revocation
	close    sync.Once
}

var (
	_ broker.Subscriber = (*Subscriber)(nil)
	_ broker.KeySharer  = (*Subscriber)(nil)
)

type topicPartition struct {
	topic     string
	partition int32
}

// partition is what the Subscriber knows of one partition it owns.
type partition struct {
	tp        topicPartition
	gone      bool            // revoked or lost: its records' acks commit nothing
	inflight  []*entry        // records handed out or queued, in offset order, not yet committed
	commitTo  kgo.EpochOffset // the offset to commit; -1 until a record is done
	committed int64           // the offset committed by this Subscriber; -1: none
}

// entry is one record of a partition, from fetch to commit.
type entry struct {
	rec  *kgo.Record
	done bool // acknowledged or dropped
}

// NewSubscriber joins the consumer group and starts fetching. It does not
// wait for the cluster: an unreachable cluster shows up as a Next that
// waits (and as warnings in the log). ctx is not kept; the Subscriber runs
// until Close. It fails when cfg is invalid (see SubscriberConfig.Validate).
func NewSubscriber(ctx context.Context, cfg SubscriberConfig) (*Subscriber, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Subscriber{
		cfg:    cfg,
		log:    cfg.Logger.With("group", cfg.Group),
		done:   make(chan struct{}),
		wake:   make(chan struct{}, 1),
		room:   make(chan struct{}, 1),
		parts:  make(map[topicPartition]*partition),
		timers: make(map[*time.Timer]struct{}),
	}
	topics := make([]string, len(cfg.Topics))
	for i, t := range cfg.Topics {
		topics[i] = cfg.Topic(t)
	}
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(clientID),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(s.assigned),
		kgo.OnPartitionsRevoked(s.revoked),
		kgo.OnPartitionsLost(s.lost),
	}, cfg.Options...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: new client: %w", err)
	}
	s.cl = cl
	if err := ctx.Err(); err != nil {
		cl.Close()
		return nil, err
	}
	pctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.poll(pctx)
	return s, nil
}

// poll fetches records into ready while fewer than Prefetch wait there.
// Rebalances wait only while it files the records of one poll, so that a
// revocation never meets a record half filed.
func (s *Subscriber) poll(ctx context.Context) {
	defer close(s.done)
	for {
		s.mu.Lock()
		n := s.cfg.Prefetch - len(s.ready)
		s.mu.Unlock()
		if n <= 0 {
			select {
			case <-s.room:
				continue
			case <-ctx.Done():
				return
			}
		}
		fetches := s.cl.PollRecords(ctx, n)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			s.cl.AllowRebalance()
			return
		}
		failed := false
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				failed = true
				s.log.Warn("kafka: fetch failed; retrying", "topic", topic, "partition", p, "error", err)
			}
		})
		s.mu.Lock()
		fetches.EachRecord(func(r *kgo.Record) {
			p := s.parts[topicPartition{r.Topic, r.Partition}]
			if p == nil || p.gone {
				return // not ours (any more): its owner fetches it from the committed offset
			}
			e := &entry{rec: r}
			p.inflight = append(p.inflight, e)
			s.ready = append(s.ready, &delivery{s: s, p: p, e: e, attempt: 1})
		})
		s.mu.Unlock()
		s.cl.AllowRebalance()
		s.signal(s.wake)
		if failed && fetches.NumRecords() == 0 {
			// A poll that returns errors returns at once: pause rather
			// than spin (and log) while the trouble lasts.
			select {
			case <-time.After(pollBackoff):
			case <-ctx.Done():
				return
			}
		}
	}
}

// pollBackoff is the pause after a poll that fetched nothing but errors.
const pollBackoff = 500 * time.Millisecond

func (s *Subscriber) signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (s *Subscriber) assigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for topic, ps := range assigned {
		for _, p := range ps {
			tp := topicPartition{topic, p}
			if s.parts[tp] != nil {
				continue // still ours: keep what is known of it
			}
			s.parts[tp] = &partition{tp: tp, commitTo: kgo.EpochOffset{Epoch: -1, Offset: -1}, committed: -1}
		}
	}
}

// revoked commits what was acknowledged of the partitions leaving, then
// forgets them: records of theirs still waiting or in progress are the next
// owner's to deliver.
func (s *Subscriber) revoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if err := s.commitLocked(ctx); err != nil {
		s.log.Warn("kafka: commit before the partitions move failed; their acknowledged records come again to the next owner", "error", err)
	}
	s.forget(revoked)
}

// lost forgets the partitions without committing: the member is out of
// the group, its commits would be refused.
func (s *Subscriber) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.forget(lost)
}

func (s *Subscriber) forget(gone map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for topic, ps := range gone {
		for _, p := range ps {
			tp := topicPartition{topic, p}
			if part := s.parts[tp]; part != nil {
				part.gone = true
				delete(s.parts, tp)
			}
		}
	}
	kept := s.ready[:0]
	for _, d := range s.ready {
		if !d.p.gone {
			kept = append(kept, d)
		}
	}
	clear(s.ready[len(kept):])
	s.ready = kept
	s.signal(s.room)
}

// Next implements broker.Subscriber. It fails with an error wrapping
// broker.ErrUnavailable once the Subscriber is closed.
func (s *Subscriber) Next(ctx context.Context) (broker.Delivery, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, broker.Unavailable(errors.New("kafka: subscriber closed"))
		}
		for len(s.ready) > 0 {
			d := s.ready[0]
			s.ready[0] = nil
			s.ready = s.ready[1:]
			if d.p.gone || d.e.done {
				continue
			}
			s.mu.Unlock()
			s.signal(s.room)
			return d, nil
		}
		s.mu.Unlock()
		select {
		case <-s.wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Decode implements broker.Subscriber.
func (s *Subscriber) Decode(raw broker.Raw) (courier.Message, error) {
	return s.cfg.FromRaw(raw)
}

// SharesKeys implements broker.KeySharer: the members of a consumer group
// always share the partitions of its topics, and a Publisher sends each
// message to the partition of its key.
func (s *Subscriber) SharesKeys() bool { return true }

// Partitions implements broker.KeySharer: the partitions of the group's
// topics this member owns now, by number, sorted (with several topics, a
// number stands for that partition of each topic the member owns).
func (s *Subscriber) Partitions() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int
	for tp := range s.parts {
		out = append(out, int(tp.partition))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Close implements broker.Subscriber: it stops fetching, commits what was
// acknowledged and leaves the group. Records not acknowledged come again
// to the group's other members (or to the next Subscriber of the group).
// Afterwards Next and Retry fail with broker.ErrUnavailable, and Ack and
// Drop of deliveries still held commit nothing. Close may be called more
// than once.
func (s *Subscriber) Close() error {
	s.close.Do(func() {
		s.mu.Lock()
		s.closed = true
		for t := range s.timers {
			t.Stop()
		}
		clear(s.timers)
		s.mu.Unlock()
		s.signal(s.wake)
		s.cancel()
		<-s.done
		s.cl.CloseAllowingRebalance() // revokes every partition: a last commit
	})
	return nil
}

// commit commits, for every partition owned, the offset after its last
// unbroken run of acknowledged records.
func (s *Subscriber) commit(ctx context.Context) error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	return s.commitLocked(ctx)
}

func (s *Subscriber) commitLocked(ctx context.Context) error {
	s.mu.Lock()
	offsets := map[string]map[int32]kgo.EpochOffset{}
	var parts []*partition
	for tp, p := range s.parts {
		// Nothing done yet (commitTo -1) commits nothing: offset 0 would
		// rewind the group to the partition's start.
		if p.gone || p.commitTo.Offset < 0 || p.commitTo.Offset <= p.committed {
			continue
		}
		if offsets[tp.topic] == nil {
			offsets[tp.topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[tp.topic][tp.partition] = p.commitTo
		parts = append(parts, p)
	}
	s.mu.Unlock()
	if len(parts) == 0 {
		return nil
	}
	var cerr error
	s.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			cerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil && cerr == nil {
					cerr = fmt.Errorf("topic %s partition %d: %w", t.Topic, p.Partition, err)
				}
			}
		}
	})
	if cerr != nil {
		return fmt.Errorf("kafka: commit offsets of group %s: %w", s.cfg.Group, cerr)
	}
	s.mu.Lock()
	for _, p := range parts {
		p.committed = max(p.committed, offsets[p.tp.topic][p.tp.partition].Offset)
	}
	s.mu.Unlock()
	return nil
}

// delivery is one hand-out of one record.
type delivery struct {
	s       *Subscriber
	p       *partition
	e       *entry
	attempt int
}

func (d *delivery) Raw() broker.Raw { return Raw(d.e.rec) }

// Attempt counts the hand-outs of the record by this Subscriber (see
// Subscriber).
func (d *delivery) Attempt() int { return d.attempt }

// Ack marks the record done and commits its partition's offset as far as
// the records before it are done too; it returns once Kafka has the commit
// (or nothing was to commit). Call it after the handler's transaction
// committed. A record whose partition has moved to another member commits
// nothing: the new owner delivers it again and the inbox skips it.
func (d *delivery) Ack(ctx context.Context) error {
	s := d.s
	s.mu.Lock()
	if d.e.done {
		s.mu.Unlock()
		return nil
	}
	d.e.done = true
	advanced := d.p.advance()
	gone := d.p.gone
	s.mu.Unlock()
	if gone || !advanced {
		return nil
	}
	return s.commit(ctx)
}

// advance drops the unbroken run of done records at the front of
// inflight and moves commitTo past it; it reports whether commitTo moved.
// s.mu is held.
func (p *partition) advance() bool {
	n := 0
	for n < len(p.inflight) && p.inflight[n].done {
		r := p.inflight[n].rec
		p.commitTo = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset + 1}
		n++
	}
	clear(p.inflight[:n])
	p.inflight = p.inflight[n:]
	return n > 0
}

// Retry hands the record out again after delay, from this Subscriber,
// without committing. It fails once the Subscriber is closed: the record
// then comes again to the group's next owner of its partition.
func (d *delivery) Retry(_ context.Context, delay time.Duration) error {
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return broker.Unavailable(errors.New("kafka: subscriber closed; the record comes again to the partition's next owner"))
	}
	if d.e.done || d.p.gone {
		return nil
	}
	again := &delivery{s: s, p: d.p, e: d.e, attempt: d.attempt + 1}
	var t *time.Timer
	t = time.AfterFunc(max(delay, 0), func() {
		s.mu.Lock()
		if _, ok := s.timers[t]; !ok {
			s.mu.Unlock()
			return // stopped by Close
		}
		delete(s.timers, t)
		if !again.p.gone && !again.e.done {
			s.ready = append(s.ready, again)
		}
		s.mu.Unlock()
		s.signal(s.wake)
	})
	s.timers[t] = struct{}{}
	return nil
}

// Extend does nothing: Kafka does not take a record back from a member
// that keeps its place in the group.
func (d *delivery) Extend(context.Context) error { return nil }

// Drop acknowledges the record without processing (it was parked).
func (d *delivery) Drop(ctx context.Context) error { return d.Ack(ctx) }
