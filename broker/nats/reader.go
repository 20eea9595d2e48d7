package nats

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/wire"
)

// What ReadBack uses (see Reader.ReadBack).
const (
	// readPrefetch is how many messages the ordered consumer pulls ahead.
	readPrefetch = 500
	// readIdle is how long ReadBack waits for the next message before it
	// asks the server whether any is left to come.
	readIdle = 5 * time.Second
	// readCleanup bounds the deletion of the ordered consumer after a read.
	readCleanup = 5 * time.Second
)

// ReaderConfig says which stream a Reader reads and how its subjects map
// to topics.
type ReaderConfig struct {
	// Config maps the stream's subjects to topics, as the publishers of
	// the stream map topics to subjects: the Reader reads the subjects
	// under its prefix (Config.Subjects()) and decodes their messages as
	// a Subscriber does. Default: subjects "courier." + topic.
	Config Config
	// Stream is the name of the JetStream stream to read, such as
	// "COURIER" (DefaultStream). Required.
	Stream string
}

func (c *ReaderConfig) validate() error {
	switch {
	case c.Stream == "":
		return fmt.Errorf("nats: ReaderConfig.Stream is empty: name the stream to read, e.g. %q", DefaultStream)
	case strings.ContainsAny(c.Stream, " \t\r\n.*>/\\"):
		return fmt.Errorf("nats: ReaderConfig.Stream %q is not a stream name: stream names hold no white space, dots, wildcards or slashes", c.Stream)
	}
	return c.Config.Validate()
}

// Validate reports whether NewReader would accept c: nil, or the error it
// would return, naming the field and the fix.
func (c ReaderConfig) Validate() error { return c.validate() }

// Reader reads back the messages a JetStream stream holds, without
// consuming them, for an audit (broker.Reader). Each ReadBack reads the
// stream through an ordered consumer of its own, an ephemeral consumer
// that acknowledges nothing and is deleted when the read ends, so it
// leaves the stream and its durable consumers as they were. Safe for
// concurrent use.
//
// Only a stream with limits retention (JetStream's default) can be read
// back: a work-queue or interest stream removes a message once its
// consumers have it, so what it holds says nothing of what was published.
type Reader struct {
	js  jetstream.JetStream
	cfg ReaderConfig
}

var _ broker.Reader = (*Reader)(nil)

// NewReader returns a Reader of cfg.Stream on nc. It does not touch the
// server: a stream that does not exist, or cannot be read back, fails
// ReadBack. It fails when cfg is invalid (see ReaderConfig.Validate).
// The caller keeps nc, and closes it after the last ReadBack.
func NewReader(nc *natsgo.Conn, cfg ReaderConfig) (*Reader, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if nc == nil {
		return nil, errors.New("nats: NewReader: the connection is nil: connect first (see Connect)")
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("nats: jetstream: %w", err)
	}
	return &Reader{js: js, cfg: cfg}, nil
}

// ReadBack implements broker.Reader. It reads, in stream order, the
// messages of the stream stored at or after from (JetStream finds the
// first by its time) on a subject under the Reader's prefix, and stops at
// the first message stored at or after to, or at the stream's last
// message as it was when ReadBack began: what is published meanwhile is
// left for the next read. A stream with nothing in the window returns at
// once. Each message is decoded as the Subscriber decodes it (FromNATS);
// one that does not decode (a message published without Courier's
// headers) is passed with Stored.Err set, its Message holding its topic,
// payload and what its headers give of its id, key and type. Stored.Log
// is the stream's name, Offset the message's stream sequence, At the time
// JetStream stored it.
//
// since is when the stream's limits may have removed what it stored
// after from: when it removed messages before its first (its first
// sequence is past 1) and it is full (MaxMsgs, MaxBytes, a limit per
// subject), the time of its first message (for a stream that holds nothing
// any more, the instant after its last); with an age limit (MaxAge) alone,
// that age ago (or the first message's time, if earlier). A removal no
// limit explains (a deletion, a purge) moves nothing: the audit counts
// what it removed as lost. since is zero when it is not after from.
//
// Errors: a stream that does not exist (wraps jetstream.ErrStreamNotFound;
// the message says to check the name); a stream with work-queue or
// interest retention, which cannot be audited; subjects the stream does
// not capture (check Config's prefix); an unreachable server; ctx's end;
// and the first error fn returns, as it is.
func (r *Reader) ReadBack(ctx context.Context, from, to time.Time, fn func(broker.Stored) error) (time.Time, error) {
	stream, info, err := r.stream(ctx)
	if err != nil {
		return time.Time{}, err
	}
	st := info.State
	since := sinceOf(info.Config, st, from, time.Now())
	if st.Msgs == 0 || !from.Before(to) || from.After(st.LastTime) {
		return since, nil
	}
	cc := jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{r.cfg.Config.Subjects()},
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &from,
		// A consumer that cannot be made again after a reconnect fails
		// the read instead of retrying for ever.
		MaxResetAttempts: 3,
	}
	if from.IsZero() {
		cc.DeliverPolicy, cc.OptStartTime = jetstream.DeliverAllPolicy, nil
	}
	cons, err := stream.OrderedConsumer(ctx, cc)
	if err != nil {
		return time.Time{}, fmt.Errorf("nats: read back stream %s: consumer on %s: %w (does the stream capture the subjects under Config's prefix?)",
			r.cfg.Stream, r.cfg.Config.Subjects(), err)
	}
	defer r.deleteConsumer(ctx, stream, cons)
	if ci := cons.CachedInfo(); ci != nil && ci.NumPending == 0 {
		return since, nil // nothing under the prefix at or after from
	}
	if err := r.read(ctx, cons, st.LastSeq, from, to, fn); err != nil {
		return time.Time{}, err
	}
	return since, nil
}

// stream looks the stream up and checks that it can be read back.
func (r *Reader) stream(ctx context.Context) (jetstream.Stream, *jetstream.StreamInfo, error) {
	stream, err := r.js.Stream(ctx, r.cfg.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil, fmt.Errorf("nats: read back stream %s: %w: check the stream name (ReaderConfig.Stream; nats stream ls lists them)", r.cfg.Stream, err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("nats: read back stream %s: %w", r.cfg.Stream, err)
	}
	info := stream.CachedInfo()
	if p := info.Config.Retention; p != jetstream.LimitsPolicy {
		return nil, nil, fmt.Errorf("nats: read back stream %s: it has %s retention, which removes a message once it is consumed, so what it holds cannot be audited: audit a stream with limits retention",
			r.cfg.Stream, retentionName(p))
	}
	return stream, info, nil
}

func retentionName(p jetstream.RetentionPolicy) string {
	switch p {
	case jetstream.WorkQueuePolicy:
		return "work-queue"
	case jetstream.InterestPolicy:
		return "interest"
	}
	return p.String()
}

// sinceOf returns ReadBack's since for a stream of configuration cfg in
// state st, read at now (see ReadBack).
func sinceOf(cfg jetstream.StreamConfig, st jetstream.StreamState, from, now time.Time) time.Time {
	if st.FirstSeq <= 1 {
		return time.Time{} // it holds every message it ever stored
	}
	// Messages before the first were removed. The limits account for it
	// when the stream is full (it removes its oldest messages to store
	// new ones), or, for an age limit, for those older than the limit: a
	// removal neither explains (a deletion, a purge) is a loss.
	first := st.FirstTime
	if st.Msgs == 0 {
		first = st.LastTime.Add(time.Nanosecond) // it holds nothing it stored up to its last message
	}
	var since time.Time
	switch {
	case full(cfg, st):
		since = first
	case cfg.MaxAge > 0:
		since = now.Add(-cfg.MaxAge)
		if first.Before(since) {
			since = first
		}
	}
	if since.After(from) {
		return since
	}
	return time.Time{}
}

// full reports whether a stream of configuration cfg in state st is at one
// of its limits of messages or bytes, where it removes its oldest messages
// (or, with a limit per subject, its subjects' oldest) to store new ones.
// A limit of bytes counts as reached within a tenth of it, since messages
// differ in size.
func full(cfg jetstream.StreamConfig, st jetstream.StreamState) bool {
	return (cfg.MaxMsgs > 0 && st.Msgs >= uint64(cfg.MaxMsgs)) ||
		(cfg.MaxBytes > 0 && st.Bytes >= uint64(cfg.MaxBytes)-uint64(cfg.MaxBytes)/10) ||
		cfg.MaxMsgsPerSubject > 0
}

// read passes fn the messages cons delivers until one is past lastSeq or
// stored at or after to, or none is left up to lastSeq.
func (r *Reader) read(ctx context.Context, cons jetstream.Consumer, lastSeq uint64, from, to time.Time, fn func(broker.Stored) error) error {
	iter, err := cons.Messages(jetstream.PullMaxMessages(readPrefetch))
	if err != nil {
		return fmt.Errorf("nats: read back stream %s: %w", r.cfg.Stream, err)
	}
	defer iter.Stop()
	var seen uint64 // the stream sequence of the last message delivered
	for {
		nctx, cancel := context.WithTimeout(ctx, readIdle)
		m, err := iter.Next(jetstream.NextContext(nctx))
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, context.DeadlineExceeded) {
				// Nothing came for a while: the messages left up to
				// lastSeq may have been removed by the stream's limits.
				if done, err := r.drained(ctx, cons, seen); err != nil || done {
					return err
				}
				continue
			}
			return fmt.Errorf("nats: read back stream %s after sequence %d: %w", r.cfg.Stream, seen, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("nats: read back stream %s after sequence %d: %w", r.cfg.Stream, seen, err)
		}
		seq := md.Sequence.Stream
		seen = seq
		if seq > lastSeq || !md.Timestamp.Before(to) {
			return nil
		}
		if !md.Timestamp.Before(from) {
			if err := fn(r.stored(m, md)); err != nil {
				return err
			}
		}
		if seq == lastSeq || md.NumPending == 0 {
			return nil
		}
	}
}

// drained reports whether cons has nothing left to deliver: no message
// pending, and none delivered past seen (on its way to the client).
func (r *Reader) drained(ctx context.Context, cons jetstream.Consumer, seen uint64) (bool, error) {
	ci, err := cons.Info(ctx)
	if err != nil {
		return false, fmt.Errorf("nats: read back stream %s after sequence %d: no message for %s, and the consumer's state is unknown: %w",
			r.cfg.Stream, seen, readIdle, err)
	}
	return ci.NumPending == 0 && ci.Delivered.Stream <= seen, nil
}

// deleteConsumer deletes the ordered consumer at once rather than leaving
// it to the server's inactivity threshold.
func (r *Reader) deleteConsumer(ctx context.Context, stream jetstream.Stream, cons jetstream.Consumer) {
	ci := cons.CachedInfo()
	if ci == nil {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readCleanup)
	defer cancel()
	_ = stream.DeleteConsumer(dctx, ci.Name)
}

// stored returns m as a broker.Stored.
func (r *Reader) stored(m jetstream.Msg, md *jetstream.MsgMetadata) broker.Stored {
	s := broker.Stored{At: md.Timestamp, Log: r.cfg.Stream, Offset: int64(md.Sequence.Stream)}
	h := m.Headers()
	s.Message, s.Err = r.cfg.Config.FromNATS(&natsgo.Msg{Subject: m.Subject(), Header: h, Data: m.Data()})
	if s.Err != nil {
		s.Message = courier.Message{Topic: r.cfg.Config.Topic(m.Subject()), Key: h.Get(HeaderKey), Type: wire.TypeOf(h), Payload: m.Data()}
		if id, err := uuid.Parse(h.Get(wire.NATS.IDHeader())); err == nil {
			s.Message.ID = id
		}
	}
	return s
}
