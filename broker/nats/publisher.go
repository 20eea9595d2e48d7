package nats

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/cloudevents"
)

// ErrNoStream is wrapped by the error Publish returns for a message whose
// subject no JetStream stream binds: JetStream answered that no stream's
// subjects match it. The broker is up; the message cannot be stored until an
// operator binds a stream to the subject or the topic is corrected, so the
// failure counts against the message's attempts (it is not
// broker.ErrUnavailable) and the message becomes a dead letter in the end
// instead of holding its key back for ever.
var ErrNoStream = errors.New("nats: no stream binds the subject")

// Publisher publishes messages to JetStream with asynchronous publishes,
// waiting for every acknowledgement. It is safe for concurrent use.
type Publisher struct {
	js     jetstream.JetStream
	cfg    Config
	ce     *cloudevents.Config // nil: CloudEvents off
	lookup time.Duration       // bound on one stream lookup

	mu    sync.Mutex
	bound map[string]struct{} // subjects a stream acknowledged

	batching // atomic batches: see batch.go
}

var (
	_ broker.Publisher   = (*Publisher)(nil)
	_ broker.OrderKeeper = (*Publisher)(nil)
)

// maxBound caps the subjects a Publisher remembers as bound; beyond it the
// memory starts afresh (it costs one lookup per subject to rebuild).
const maxBound = 10000

// NewPublisher returns a Publisher on nc. For a relay, connect with
// [Connect] (or set nats.ReconnectBufSize(-1) yourself) so publishes fail
// fast while the connection is down instead of queueing behind it. It fails
// when cfg is invalid (see PublisherConfig.Validate).
func NewPublisher(nc *natsgo.Conn, cfg PublisherConfig) (*Publisher, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(cfg.AckTimeout), jetstream.WithPublishAsyncMaxPending(cfg.MaxPending))
	if err != nil {
		return nil, fmt.Errorf("nats: jetstream: %w", err)
	}
	p := &Publisher{js: js, cfg: cfg.Config, ce: cfg.CloudEvents.Clone(), lookup: min(cfg.AckTimeout, maxLookup), bound: make(map[string]struct{})}
	p.batching.init(cfg.MaxBatches, cfg.BatchTime, cfg.NoAtomicBatches)
	return p, nil
}

// toNATS converts a message to a JetStream message, with its CloudEvents
// attributes when the Publisher has them on.
func (p *Publisher) toNATS(m *courier.Message) *natsgo.Msg { return p.cfg.natsMsg(m, p.ce) }

// Publish implements broker.Publisher. Once KeepsKeyOrder has reported
// true, it publishes each topic and key's run of messages in the call as
// atomic batches or in rounds, as BatchTime weighs them, keeping the key's
// order (see the package documentation).
// Until then, hand it at most one message per key per call, waiting for
// its answer before the next, as the relay does: of several messages of a
// key published at once, a later one may be stored when an earlier one
// failed, and an earlier one whose acknowledgement was lost is stored but
// reported failed.
//
// A subject no stream binds gets no acknowledgement: NATS answers "no
// responders" at once, or, when a plain subscriber listens on the subject,
// the publish times out after AckTimeout. JetStream that is not ready (a
// server still starting, a clustered stream without a leader, JetStream off)
// looks the same. Publish tells them apart by asking JetStream which stream
// binds the subject, at most once per subject and call:
//
//   - Before the first publish on a subject (and again after a publish on it
//     went unanswered), so that a message no stream would take fails at once
//     instead of holding up the acknowledgements of the others. A subject a
//     stream has acknowledged is not asked about again.
//   - After a publish went unanswered.
//
// When JetStream answers that no stream binds the subject, the message fails
// with an error wrapping ErrNoStream that names the subject and the fix; it
// counts against the message. When JetStream names a stream, or does not
// answer, the error wraps broker.ErrUnavailable (after one unanswered lookup
// the call asks no more). Each lookup takes at most min(AckTimeout, 1s).
//
// Other errors: a message over the server's max_payload or the stream's
// max_msg_size, headers over JetStream's 64 KiB, an invalid subject or
// headers the client cannot encode are refused for good: the error wraps
// broker.ErrRejected, names the subject, the size and the limit where they
// apply, and says what to change. A request the server calls bad counts
// against the message without being permanent. Everything else (connection
// lost or closed, timeouts, a full stream, ctx ending) wraps
// broker.ErrUnavailable.
func (p *Publisher) Publish(ctx context.Context, msgs []courier.Message) []error {
	errs := make([]error, len(msgs))
	lk := &lookups{p: p}
	if !p.pipelines() {
		all := make([]int, len(msgs))
		for i := range all {
			all[i] = i
		}
		p.publishEach(ctx, lk, msgs, all, errs)
		return errs
	}
	p.publishRuns(ctx, lk, msgs, errs)
	return errs
}

// publishEach publishes the messages msgs[idx] asynchronously, in idx
// order, and waits for their acknowledgements, setting errs[i] for each.
func (p *Publisher) publishEach(ctx context.Context, lk *lookups, msgs []courier.Message, idx []int, errs []error) {
	futures := make([]jetstream.PubAckFuture, len(idx))
	for n, i := range idx {
		if subject := p.cfg.Subject(msgs[i].Topic); !p.isBound(subject) {
			if err := lk.preflight(ctx, &msgs[i]); err != nil {
				errs[i] = err
				continue
			}
		}
		f, err := p.js.PublishMsgAsync(p.toNATS(&msgs[i]), jetstream.WithRetryAttempts(0))
		if err != nil {
			errs[i] = p.classify(&msgs[i], err)
			continue
		}
		futures[n] = f
	}
	for n, f := range futures {
		if f == nil {
			continue
		}
		_, errs[idx[n]] = p.await(ctx, lk, &msgs[idx[n]], f)
	}
}

// await waits for f, the acknowledgement of a publish of m, and returns
// it, or the failure, classified.
func (p *Publisher) await(ctx context.Context, lk *lookups, m *courier.Message, f jetstream.PubAckFuture) (*jetstream.PubAck, error) {
	ack, refused, err := p.wait(ctx, lk, m, f)
	if refused {
		return nil, p.classify(m, err)
	}
	return ack, err
}

// wait waits for f, the acknowledgement of a publish of m (of a batch
// whose first message is m), and keeps what it says about m's subject.
// It returns the acknowledgement; or the failure of a publish no stream
// answered (no responders, no answer in time), classified by asking
// JetStream which stream binds the subject, or ctx's end; or, with
// refused true, the refusal JetStream answered with, for the caller to
// classify.
func (p *Publisher) wait(ctx context.Context, lk *lookups, m *courier.Message, f jetstream.PubAckFuture) (ack *jetstream.PubAck, refused bool, err error) {
	select {
	case ack := <-f.Ok():
		p.setBound(p.cfg.Subject(m.Topic), true)
		return ack, false, nil
	case err := <-f.Err():
		if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, jetstream.ErrAsyncPublishTimeout) {
			p.setBound(p.cfg.Subject(m.Topic), false)
			return nil, false, lk.verdict(ctx, m, err)
		}
		return nil, true, err
	case <-ctx.Done():
		return nil, false, broker.Unavailable(fmt.Errorf("waiting for the ack: %w", ctx.Err()))
	}
}

func (p *Publisher) isBound(subject string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.bound[subject]
	return ok
}

func (p *Publisher) setBound(subject string, bound bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !bound {
		delete(p.bound, subject)
		return
	}
	if len(p.bound) >= maxBound {
		clear(p.bound)
	}
	p.bound[subject] = struct{}{}
}
