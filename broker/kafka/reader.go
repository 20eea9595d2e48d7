package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/wire"
)

// readIdle is how long ReadBack waits for the next record of the
// partitions it has not finished before it gives up (see ReadBack): a
// fetch with records to return answers at once, and one without waits at
// most FetchMaxWait, 5s by default.
const readIdle = 15 * time.Second

// ReaderConfig says which topics a Reader reads, on which cluster.
type ReaderConfig struct {
	// Config names the cluster and maps topics to Kafka topics (the topic
	// prefix is added).
	Config Config
	// Topics are the message topics to read (TopicPrefix is added). At
	// least one is required: Kafka has no wildcard over the topics of one
	// publisher.
	Topics []string
	// Options are more franz-go options (TLS, SASL, …), applied after
	// Courier's to the Reader's clients. Leave consumer groups out: the
	// Reader consumes the partitions directly, committing nothing.
	// Default none.
	Options []kgo.Opt
}

func (c *ReaderConfig) validate() error {
	if err := c.Config.Validate(); err != nil {
		return err
	}
	if len(c.Topics) == 0 {
		return errors.New("kafka: ReaderConfig.Topics is empty: list the message topics to read, e.g. []string{\"orders\"}")
	}
	if i := slices.Index(c.Topics, ""); i >= 0 {
		return fmt.Errorf("kafka: ReaderConfig.Topics[%d] is empty: name a message topic, e.g. \"orders\"", i)
	}
	return nil
}

// Validate reports whether NewReader would accept c without asking the
// cluster: nil, or the error it would return, naming the field and the
// fix.
func (c ReaderConfig) Validate() error { return c.validate() }

// Reader reads back the records Kafka keeps on some topics, without
// consuming them in any group and without committing, for an audit
// (broker.Reader). It owns a franz-go client, and each ReadBack one more
// for its reading: Close the Reader when done. Safe for concurrent use.
type Reader struct {
	cfg    ReaderConfig
	topics []string // the Kafka topics
	cl     *kgo.Client
	adm    *kadm.Client
	close  sync.Once
}

var _ broker.Reader = (*Reader)(nil)

// NewReader returns a Reader of cfg.Topics. It asks the cluster for the
// topics, so that a wrong address or topic shows at once: it fails when
// cfg is invalid (see ReaderConfig.Validate), when the cluster does not
// answer before ctx ends, and when a topic does not exist (the error wraps
// ErrNoTopic and names it).
func NewReader(ctx context.Context, cfg ReaderConfig) (*Reader, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &Reader{cfg: cfg}
	for _, t := range cfg.Topics {
		r.topics = append(r.topics, cfg.Config.Topic(t))
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cfg.Config.Brokers...), kgo.ClientID(clientID)}, cfg.Options...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka: new client: %w", err)
	}
	r.cl, r.adm = cl, kadm.NewClient(cl)
	details, err := r.adm.ListTopics(ctx, r.topics...)
	if err == nil {
		for _, t := range r.topics {
			if d, ok := details[t]; !ok || d.Err != nil {
				err = r.topicError(t, d.Err)
				break
			}
		}
	} else {
		err = fmt.Errorf("kafka: look up topics %s: %w", strings.Join(r.topics, ", "), err)
	}
	if err != nil {
		cl.Close()
		return nil, err
	}
	return r, nil
}

// Close closes the Reader's client. Call it after the last ReadBack; it
// may be called more than once.
func (r *Reader) Close() { r.close.Do(r.cl.Close) }

// topicError returns the error for Kafka topic t, which the cluster
// answered with err (nil: left out of the answer).
func (r *Reader) topicError(t string, err error) error {
	if err == nil || errors.Is(err, kerr.UnknownTopicOrPartition) {
		return fmt.Errorf("kafka: read back topic %s: %w: check the topics to read (ReaderConfig.Topics) and the topic prefix %q", t, ErrNoTopic, r.cfg.Config.TopicPrefix)
	}
	return fmt.Errorf("kafka: read back topic %s: %w", t, err)
}

// part is one partition of a ReadBack.
type part struct {
	topic     string
	partition int32
	next, end int64 // the next offset to read, the offset to stop at
	done      bool
}

func (p *part) String() string { return p.topic + "/" + strconv.Itoa(int(p.partition)) }

// ReadBack implements broker.Reader. For each partition of the Reader's
// topics, it lists the offset of the first record at or after from (Kafka
// finds it by its timestamp, to the millisecond) and the end offset, then
// consumes the partition directly from the one to the other, stopping
// early at the first record whose timestamp is at or after to: records
// produced meanwhile are left for the next read. Each partition's records
// come in offset order, the partitions' interleaved. Each record is
// decoded as the Subscriber decodes it (FromRaw); one that does not decode
// (a record of another producer without Courier's headers) is passed with
// Stored.Err set, its Message holding its topic, payload and what its key
// and headers give of its id, key and type. Stored.Log is
// "<Kafka topic>/<partition>" (with the topic prefix), Offset the record's
// offset, At its timestamp (in UTC, to the millisecond): the time of publication for Courier's
// Publisher (CreateTime), or when Kafka appended it for a topic with
// message.timestamp.type=LogAppendTime.
//
// since is, over the partitions whose log start offset is past 0
// (retention or a deletion removed records) and whose first record left
// was stored after from, the latest such record's timestamp; zero when
// there is none. A partition whose records have all been removed says
// nothing of when they were stored and leaves since as it is.
//
// Errors: a topic that does not exist (wraps ErrNoTopic and names it); a
// partition whose offsets cannot be listed or whose records cannot be
// fetched; no record for 15s from a partition not yet read to its end (the
// offsets left may hold only the markers of transactions, which no
// consumer sees, or the cluster has stopped answering); ctx's end; and the
// first error fn returns, as it is.
func (r *Reader) ReadBack(ctx context.Context, from, to time.Time, fn func(broker.Stored) error) (time.Time, error) {
	if !from.Before(to) {
		return time.Time{}, nil
	}
	parts, since, err := r.plan(ctx, from)
	if err != nil || len(parts) == 0 {
		return since, err
	}
	if err := r.consume(ctx, parts, from, to, fn); err != nil {
		return time.Time{}, err
	}
	return since, nil
}

// plan lists the partitions' offsets and returns those with records to
// read at or after from, and since.
func (r *Reader) plan(ctx context.Context, from time.Time) ([]*part, time.Time, error) {
	ends, err := r.list(r.adm.ListEndOffsets(ctx, r.topics...))
	if err != nil {
		return nil, time.Time{}, err
	}
	starts, err := r.list(r.adm.ListStartOffsets(ctx, r.topics...))
	if err != nil {
		return nil, time.Time{}, err
	}
	// Timestamps before 1970 are Kafka's special values (-1 latest, -2
	// earliest, …): from the epoch is from the start.
	byTime, err := r.list(r.adm.ListOffsetsAfterMilli(ctx, max(from.UnixMilli(), 0), r.topics...))
	if err != nil {
		return nil, time.Time{}, err
	}
	var parts []*part
	var since time.Time
	ends.Each(func(e kadm.ListedOffset) {
		s, _ := starts.Lookup(e.Topic, e.Partition)
		b, ok := byTime.Lookup(e.Topic, e.Partition)
		if !ok || b.Offset < 0 {
			b.Offset = e.Offset
		}
		if s.Offset > 0 && b.Offset == s.Offset && b.Offset < e.Offset && b.Timestamp >= 0 {
			if at := time.UnixMilli(b.Timestamp).UTC(); at.After(from) && at.After(since) {
				since = at
			}
		}
		if start := max(b.Offset, s.Offset); start < e.Offset {
			parts = append(parts, &part{topic: e.Topic, partition: e.Partition, next: start, end: e.Offset})
		}
	})
	return parts, since, nil
}

// list returns offsets, or the first error listing them: a topic missing,
// a partition that failed.
func (r *Reader) list(offsets kadm.ListedOffsets, err error) (kadm.ListedOffsets, error) {
	if err != nil {
		return nil, fmt.Errorf("kafka: read back topics %s: list offsets: %w", strings.Join(r.topics, ", "), err)
	}
	for _, t := range r.topics {
		ps, ok := offsets[t]
		if !ok {
			return nil, r.topicError(t, nil)
		}
		for p, o := range ps {
			switch {
			case o.Err != nil && (p < 0 || errors.Is(o.Err, kerr.UnknownTopicOrPartition)):
				// A partition the cluster no longer knows: the topic
				// was deleted since the client last looked.
				return nil, r.topicError(t, o.Err)
			case o.Err != nil:
				return nil, fmt.Errorf("kafka: read back %s/%d: list offsets: %w", t, p, o.Err)
			}
		}
	}
	return offsets, nil
}

// consume reads parts with a client of its own and passes fn the records
// in [from, to).
func (r *Reader) consume(ctx context.Context, parts []*part, from, to time.Time, fn func(broker.Stored) error) error {
	byTP := make(map[string]map[int32]*part)
	offsets := make(map[string]map[int32]kgo.Offset)
	for _, p := range parts {
		if byTP[p.topic] == nil {
			byTP[p.topic], offsets[p.topic] = make(map[int32]*part), make(map[int32]kgo.Offset)
		}
		byTP[p.topic][p.partition] = p
		offsets[p.topic][p.partition] = kgo.NewOffset().At(p.next)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(r.cfg.Config.Brokers...),
		kgo.ClientID(clientID),
		kgo.ConsumePartitions(offsets),
		// Records removed since the offsets were listed: go on from the
		// partition's new start.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}, r.cfg.Options...)...)
	if err != nil {
		return fmt.Errorf("kafka: new client: %w", err)
	}
	defer cl.Close()
	left := len(parts)
	finish := func(p *part) {
		p.done = true
		left--
		cl.PauseFetchPartitions(map[string][]int32{p.topic: {p.partition}})
	}
	progress := time.Now()
	for left > 0 {
		pctx, cancel := context.WithDeadline(ctx, progress.Add(readIdle))
		fetches := cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fetchError(fetches); err != nil {
			return err
		}
		for it := fetches.RecordIter(); !it.Done(); {
			rec := it.Next()
			p := byTP[rec.Topic][rec.Partition]
			if p == nil || p.done {
				continue
			}
			progress, p.next = time.Now(), rec.Offset+1
			if rec.Offset >= p.end || !rec.Timestamp.Before(to) {
				finish(p)
				continue
			}
			if !rec.Timestamp.Before(from) {
				if err := fn(r.stored(rec)); err != nil {
					return err
				}
			}
			if p.next >= p.end {
				finish(p)
			}
		}
		if left > 0 && time.Since(progress) >= readIdle {
			return stalled(parts)
		}
	}
	return nil
}

// fetchError returns the first error of fetches that ends the read:
// neither the end of a poll's wait nor records lost and skipped over.
func fetchError(fetches kgo.Fetches) error {
	var ferr error
	fetches.EachError(func(t string, p int32, err error) {
		var lost *kgo.ErrDataLoss
		if ferr != nil || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &lost) {
			return
		}
		ferr = fmt.Errorf("kafka: read back %s/%d: fetch: %w", t, p, err)
	})
	return ferr
}

// stalled returns the error of a read whose partitions left gave no
// record for readIdle.
func stalled(parts []*part) error {
	var left []string
	for _, p := range parts {
		if !p.done {
			left = append(left, fmt.Sprintf("%s from offset %d to %d", p, p.next, p.end))
		}
	}
	return fmt.Errorf("kafka: read back: no record for %s from %s: the offsets left hold no record a consumer sees (transaction markers), or the cluster stopped answering; try again",
		readIdle, strings.Join(left, ", "))
}

// stored returns rec as a broker.Stored.
func (r *Reader) stored(rec *kgo.Record) broker.Stored {
	s := broker.Stored{At: rec.Timestamp.UTC(), Log: rec.Topic + "/" + strconv.Itoa(int(rec.Partition)), Offset: rec.Offset}
	raw := Raw(rec)
	s.Message, s.Err = r.cfg.Config.FromRaw(raw)
	if s.Err != nil {
		first := func(name string) string {
			if vs := raw.Headers[name]; len(vs) > 0 {
				return vs[0]
			}
			return ""
		}
		s.Message = courier.Message{Topic: r.cfg.Config.MessageTopic(rec.Topic), Key: first(HeaderKey), Type: wire.TypeOf(raw.Headers), Payload: rec.Value}
		if id, err := uuid.Parse(first(wire.Kafka.IDHeader())); err == nil {
			s.Message.ID = id
		}
	}
	return s
}
