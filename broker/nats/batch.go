package nats

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
)

// Headers of JetStream's atomic batch publish (ADR-50): every message of a
// batch carries the batch's id and its place in the batch; the last one
// also carries the commit, and only it is acknowledged.
const (
	headerBatchID     = "Nats-Batch-Id"
	headerBatchSeq    = "Nats-Batch-Sequence"
	headerBatchCommit = "Nats-Batch-Commit"
)

// JetStream's error codes for atomic batches (nats.go names none of them).
const (
	errCodeBatchDisabled          jetstream.ErrorCode = 10174 // the stream does not allow atomic publish
	errCodeBatchMissingSeq        jetstream.ErrorCode = 10175
	errCodeBatchIncomplete        jetstream.ErrorCode = 10176 // a message of the batch went missing; nothing stored
	errCodeBatchUnsupportedHeader jetstream.ErrorCode = 10177 // 2.12.0: Nats-Msg-Id not allowed in a batch
	errCodeBatchTooLarge          jetstream.ErrorCode = 10199 // over the server's batch limit (max_msgs)
	errCodeBatchDuplicateMsgID    jetstream.ErrorCode = 10201 // a message id the stream already holds
	errCodeBatchTooManyInflight   jetstream.ErrorCode = 10210 // too many open batches on the stream or server
)

const (
	// defaultBatchSize is JetStream's default limit of messages in one
	// atomic batch (jetstream { limits { batch { max_msgs } } }); a server
	// configured lower says so, and the Publisher takes its limit.
	defaultBatchSize = 1000
	// batchHeaderRoom is what the batch headers add to a message's size,
	// at most (a UUID, a sequence number, the commit).
	batchHeaderRoom = 128
	// maxHeaderBytes is JetStream's limit on a message's headers.
	maxHeaderBytes = 65535
	// recheck is how long what the Publisher learned about the streams
	// (which allow atomic batches, their max_msg_size) is trusted.
	recheck = 30 * time.Second
	// busyTries bounds the attempts of a batch the server refuses because
	// too many batches are open; it waits busyWait times the attempt
	// between them.
	busyTries = 5
	busyWait  = 20 * time.Millisecond
)

// batching is the Publisher's state for atomic batches.
type batching struct {
	maxBatches int
	rtt        average       // a round trip, measured on the rounds
	batchTime  average       // a batch's time on the server, measured on the batches
	batchAll   bool          // every run of several messages as atomic batches (tests)
	open       chan struct{} // a token per atomic batch open, at most maxBatches
	off        bool          // PublisherConfig.NoAtomicBatches
	refused    atomic.Bool   // the server refused Nats-Msg-Id in a batch (2.12.0)
	size       atomic.Int64  // messages per batch
	promised   atomic.Bool   // KeepsKeyOrder has answered true

	omu     sync.Mutex
	checked time.Time // when keeps was last found out
	keeps   bool

	fmu   sync.Mutex
	facts map[string]streamFacts // by subject
}

// streamFacts is what the Publisher knows of the stream that binds a
// subject.
type streamFacts struct {
	atomic  bool  // allow_atomic
	maxSize int64 // max_msg_size; 0 or less: none
	at      time.Time
}

func (b *batching) init(maxBatches int, batchTime time.Duration, off bool) {
	b.maxBatches, b.off = maxBatches, off
	b.rtt.avg, b.batchTime.avg = rttPrior, batchTime
	b.open = make(chan struct{}, maxBatches)
	b.size.Store(defaultBatchSize)
	b.facts = make(map[string]streamFacts)
}

// atomicServer reports whether a server of this version (from the
// connection's INFO) takes atomic batches: nats-server 2.12 and later.
func atomicServer(version string) bool { return serverAtLeast(version, 12) }

// serverAtLeast reports whether version, a nats-server version such as
// "2.10.3", is 2.minor or later.
func serverAtLeast(version string, minor int) bool {
	var major, min int
	if _, err := fmt.Sscanf(version, "%d.%d", &major, &min); err != nil {
		return false
	}
	return major > 2 || major == 2 && min >= minor
}

// serverBatches reports whether the Publisher may send atomic batches on
// its connection as it is now.
func (p *Publisher) serverBatches() bool {
	return !p.off && !p.refused.Load() && atomicServer(p.js.Conn().ConnectedServerVersion())
}

// pipelines reports whether Publish groups a call's messages by topic and
// key and keeps the promise of broker.OrderKeeper: once KeepsKeyOrder has
// said so. Until then Publish sends every message at once, as it does on
// servers without atomic batches.
func (p *Publisher) pipelines() bool {
	return p.promised.Load()
}

// KeepsKeyOrder implements broker.OrderKeeper. It reports true when the
// Publisher publishes each key's run of messages in a call in order, as
// atomic batches or in rounds (see Publish): the connected server is
// nats-server 2.12 or later, atomic
// batches are not turned off (PublisherConfig.NoAtomicBatches), and every
// stream that captures the publisher's subjects (Config.Subjects) allows
// atomic publish (allow_atomic, see StreamConfig; with Config.NoPrefix that
// is every stream of the account, key-value buckets included). The streams
// are looked
// up at most every 30 seconds; until one captures the subjects, and while
// JetStream does not answer, the answer stays what it was (false at first).
//
// Once it has answered true, Publish keeps the promise whatever happens
// next: a key's run to a stream that does not allow atomic publish, or on a
// server that cannot take them (a reconnect to an older server), is
// published one message after the other, each waiting for the acknowledgement
// of the one before, and the run stops at its first failure.
func (p *Publisher) KeepsKeyOrder() bool {
	if !p.serverBatches() {
		return false
	}
	p.omu.Lock()
	defer p.omu.Unlock()
	if !p.checked.IsZero() && time.Since(p.checked) < recheck {
		return p.keeps
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.lookup)
	defer cancel()
	keeps, err := p.streamsAllowAtomic(ctx)
	p.checked = time.Now()
	if err == nil {
		p.keeps = keeps
	}
	if p.keeps {
		p.promised.Store(true)
	}
	return p.keeps
}

// streamsAllowAtomic reports whether at least one stream captures the
// publisher's subjects and all that do allow atomic publish.
func (p *Publisher) streamsAllowAtomic(ctx context.Context) (bool, error) {
	lister := p.js.StreamNames(ctx, jetstream.WithStreamListSubject(p.cfg.Subjects()))
	var names []string
	for name := range lister.Name() {
		names = append(names, name)
	}
	if err := lister.Err(); err != nil {
		return false, err
	}
	for _, name := range names {
		s, err := p.js.Stream(ctx, name)
		if err != nil {
			return false, err
		}
		if !s.CachedInfo().Config.AllowAtomicPublish {
			return false, nil
		}
	}
	return len(names) > 0, nil
}

// streamFacts returns what the Publisher knows of the stream that binds
// m's subject, asking JetStream when it knows nothing recent of m's topic;
// false when JetStream does not say.
func (p *Publisher) streamFacts(ctx context.Context, m *courier.Message) (streamFacts, bool) {
	subject := p.cfg.Subject(m.Topic) // what is known is known per topic, whatever the key
	p.fmu.Lock()
	f, ok := p.facts[subject]
	p.fmu.Unlock()
	if ok && time.Since(f.at) < recheck {
		return f, true
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.lookup)
	defer cancel()
	name, err := p.js.StreamNameBySubject(lctx, p.cfg.MessageSubject(m.Topic, m.Key))
	if err != nil {
		return streamFacts{}, false
	}
	s, err := p.js.Stream(lctx, name)
	if err != nil {
		return streamFacts{}, false
	}
	cfg := s.CachedInfo().Config
	f = streamFacts{atomic: cfg.AllowAtomicPublish, maxSize: int64(cfg.MaxMsgSize), at: time.Now()}
	p.fmu.Lock()
	defer p.fmu.Unlock()
	if len(p.facts) >= maxBound {
		clear(p.facts)
	}
	p.facts[subject] = f
	return f, true
}

func (p *Publisher) forgetFacts(subject string) {
	p.fmu.Lock()
	defer p.fmu.Unlock()
	delete(p.facts, subject)
}

// publishRuns publishes msgs grouped by topic and key, keeping
// broker.OrderKeeper's promise. The longest runs of one key, as many as
// pay for themselves (see batched), go by publishRun in atomic batches, up to
// maxBatches runs at once; every other run (a single message too) goes by
// publishRounds, all keys at once, a message of a key after the
// acknowledgement of the one before.
func (p *Publisher) publishRuns(ctx context.Context, lk *lookups, msgs []courier.Message, errs []error) {
	type topicKey struct{ topic, key string }
	pos := make(map[topicKey]int, len(msgs))
	var runs [][]int
	for i := range msgs {
		k := topicKey{msgs[i].Topic, msgs[i].Key}
		if r, ok := pos[k]; ok {
			runs[r] = append(runs[r], i)
			continue
		}
		pos[k] = len(runs)
		runs = append(runs, []int{i})
	}
	var long, short [][]int
	for _, r := range runs {
		if len(r) > 1 && p.mayBatch(ctx, msgs, r) {
			long = append(long, r)
			continue
		}
		short = append(short, r)
	}
	long, short = p.batched(long, short)
	work := make(chan []int, len(long))
	batches := 0 // about: a run goes in batches of at most size
	for _, r := range long {
		work <- r
		batches += (len(r) + int(p.size.Load()) - 1) / int(p.size.Load())
	}
	close(work)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		ended time.Time // when the last run of batches ended
	)
	began := time.Now()
	for range min(p.maxBatches, len(work)) {
		wg.Go(func() {
			for r := range work {
				p.publishRun(ctx, lk, msgs, r, errs)
			}
			mu.Lock()
			ended = time.Now()
			mu.Unlock()
		})
	}
	p.publishRounds(ctx, lk, msgs, short, errs)
	wg.Wait()
	if batches > 0 && allStored(long, errs) {
		// The batches take turns on the server: each took about the
		// time of them all over their number.
		p.batchTime.note(ended.Sub(began) / time.Duration(batches))
	}
}

// allStored reports whether every message of runs was published.
func allStored(runs [][]int, errs []error) bool {
	for _, r := range runs {
		for _, i := range r {
			if errs[i] != nil {
				return false
			}
		}
	}
	return true
}

// mayBatch reports whether run, the indexes of messages of one topic and
// key, goes where an atomic batch may be sent: a server that takes them, a
// stream known to allow them.
func (p *Publisher) mayBatch(ctx context.Context, msgs []courier.Message, run []int) bool {
	if !p.serverBatches() {
		return false
	}
	facts, ok := p.streamFacts(ctx, &msgs[run[0]])
	return ok && facts.atomic
}

// batched splits runs between atomic batches and rounds so that the call
// costs the server least: b batches cost b times a batch's time, and the
// rounds as many round trips as the longest run left to them (both share
// the server, so their costs add up), each as the Publisher has measured
// them lately (until it has, a round trip of 150 µs and a batch of
// BatchTime). A batch is weighed a quarter above its measure: the two
// measures move with the load from call to call, and where the ways come
// close rounds are the safer (a round trip waits on the network, a batch
// holds the server's stream for its time). It returns the runs of
// candidates (which may go as batches) to batch, the longest ones, and the
// rest, with short, to send in rounds.
func (p *Publisher) batched(candidates, short [][]int) (batch, rounds [][]int) {
	if p.batchAll {
		return candidates, short
	}
	// A batch's cost in round trips, weighed a quarter above its measure.
	cost := int(min(max(p.batchTime.get()*5/4/max(p.rtt.get(), time.Microsecond), 1), math.MaxInt32))
	slices.SortStableFunc(candidates, func(a, b []int) int { return len(b) - len(a) })
	longestShort := 0
	for _, r := range short {
		longestShort = max(longestShort, len(r))
	}
	best, least := 0, math.MaxInt
	for n := 0; n <= len(candidates); n++ {
		left := longestShort
		if n < len(candidates) {
			left = max(len(candidates[n]), longestShort)
		}
		if c := n*cost + left; c < least {
			best, least = n, c
		}
	}
	return candidates[:best], append(short, candidates[best:]...)
}

// Measuring the round trip (see batched).
const (
	// rttPrior is the round trip assumed until one is measured.
	rttPrior = 150 * time.Microsecond
	// rttSampleMost is the most messages a round that measures the round
	// trip carries: a larger round's time is mostly the server's work on
	// its messages.
	rttSampleMost = 64
)

// average is a moving average of durations the Publisher measures: the
// round trip of its rounds of few messages that all succeeded, the time of
// its batches that were stored.
type average struct {
	mu  sync.Mutex
	avg time.Duration
}

func (r *average) note(d time.Duration) {
	d = min(max(d, time.Microsecond), 100*time.Millisecond) // a lookup or a stall is no measure
	r.mu.Lock()
	defer r.mu.Unlock()
	r.avg += (d - r.avg) / 8
}

func (r *average) get() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.avg
}

// publishRounds publishes runs, each the indexes of messages of one topic
// and key, in rounds: a round publishes the next message of every run at
// once and waits for their acknowledgements. A run's message is sent only
// once the one before it is stored, so a key's order holds, and a message
// that failed other than for good holds the rest of its run back. A round
// costs one round trip, whatever the number of keys; a round of few
// messages that all succeeded measures it (see batched).
func (p *Publisher) publishRounds(ctx context.Context, lk *lookups, msgs []courier.Message, runs [][]int, errs []error) {
	idx := make([]int, 0, len(runs))
	for n := 0; len(runs) > 0; n++ {
		idx = idx[:0]
		for _, r := range runs {
			idx = append(idx, r[n])
		}
		sent := time.Now()
		p.publishEach(ctx, lk, msgs, idx, errs)
		took, failed := time.Since(sent), false
		next := runs[:0]
		for _, r := range runs {
			if err := errs[r[n]]; err != nil {
				failed = true
				if !broker.Permanent(err) {
					p.holdBack(msgs, r[n+1:], errs, err)
					continue
				}
			}
			if n+1 < len(r) {
				next = append(next, r)
			}
		}
		if !failed && len(idx) <= rttSampleMost {
			p.rtt.note(took)
		}
		runs = next
	}
}

// batchAction is what publishRun does after a batch.
type batchAction int

const (
	batchStored    batchAction = iota // all of it stored
	batchFailed                       // nothing stored; the run stops
	batchOneByOne                     // nothing stored; publish it one by one
	batchDuplicate                    // nothing stored: a message id the stream holds
	batchNoAtomic                     // nothing stored; no more batches for the run
	batchRetry                        // nothing stored; send it again (smaller)
	batchBusy                         // nothing stored; too many open batches
)

// publishRun publishes run, the indexes of several messages of one topic
// and key, keeping broker.OrderKeeper's promise: in order, and nothing after
// a message that failed other than for good. It sends the run in atomic
// batches when the stream allows them, each batch waiting for the one
// before; a message that would make the server refuse a batch (over the
// server's max_payload or the stream's max_msg_size, headers over 64 KiB)
// goes alone, so that it alone is refused. Without batches, and where a
// batch's refusal does not say which message is at fault, messages go one
// by one, each waiting for the acknowledgement of the one before.
func (p *Publisher) publishRun(ctx context.Context, lk *lookups, msgs []courier.Message, run []int, errs []error) {
	first := &msgs[run[0]]
	subject := p.cfg.Subject(first.Topic)
	if !p.isBound(subject) {
		if err := lk.preflight(ctx, first); err != nil {
			for _, i := range run {
				errs[i] = err
			}
			return
		}
	}
	var facts streamFacts
	batch := false
	if p.serverBatches() {
		facts, batch = p.streamFacts(ctx, first)
		batch = batch && facts.atomic
	}
	busy := 0
	for n := 0; n < len(run); {
		if ctx.Err() != nil {
			errs[run[n]] = broker.Unavailable(fmt.Errorf("subject %q: not sent: %w", subject, ctx.Err()))
			p.holdBack(msgs, run[n+1:], errs, errs[run[n]])
			return
		}
		end := n + 1
		if batch && p.serverBatches() {
			end = p.chunk(msgs, run, n, facts)
		}
		oneByOne, dups := end, false
		if end-n > 1 {
			action, err := p.publishBatch(ctx, lk, msgs, run[n:end])
			switch action {
			case batchStored:
				n, busy = end, 0
				continue
			case batchFailed:
				errs[run[n]] = err
				p.holdBack(msgs, run[n+1:], errs, err)
				return
			case batchRetry:
				continue
			case batchBusy:
				if busy++; busy >= busyTries {
					errs[run[n]] = broker.Unavailable(fmt.Errorf("subject %q: %w (raise the server's jetstream { limits { batch { max_inflight_per_stream } } }, or lower PublisherConfig.MaxBatches)", subject, err))
					p.holdBack(msgs, run[n+1:], errs, err)
					return
				}
				select {
				case <-time.After(time.Duration(busy) * busyWait):
				case <-ctx.Done():
				}
				continue
			case batchNoAtomic:
				batch, oneByOne = false, len(run)
			case batchOneByOne, batchDuplicate:
			}
			dups = action == batchDuplicate
		}
		// One by one: the batch's messages, or, after a batch refused for
		// a message id the stream holds (a run published before, its
		// outcome lost), until a message is stored that the stream did
		// not hold yet, and in batches again after it.
		for n < oneByOne {
			i := run[n]
			n++
			ack, err := p.publishOne(ctx, lk, &msgs[i])
			errs[i] = err
			if err != nil && !broker.Permanent(err) {
				p.holdBack(msgs, run[n:], errs, err)
				return
			}
			if dups && err == nil && !ack.Duplicate {
				break
			}
		}
	}
}

// chunk returns the end of the batch that starts at run[n]: at most the
// batch size, and before the first message a batch could not take (see
// suspect). A message the batch could not take goes alone (end n+1).
func (p *Publisher) chunk(msgs []courier.Message, run []int, n int, facts streamFacts) int {
	most := int(p.size.Load())
	end := n
	for end < len(run) && end-n < most && !p.suspect(&msgs[run[end]], facts) {
		end++
	}
	return max(end, n+1)
}

// suspect reports whether the server might refuse m inside a batch: its
// size with the batch headers is over the server's max_payload or the
// stream's max_msg_size, or its headers over JetStream's 64 KiB. Inside a
// batch, such a refusal abandons the whole batch without saying which
// message was at fault; alone, m gets its own verdict.
func (p *Publisher) suspect(m *courier.Message, facts streamFacts) bool {
	nm := p.toNATS(m)
	size := int64(nm.Size() + batchHeaderRoom)
	hdr := nm.Size() - len(nm.Subject) - len(nm.Data)
	return size > p.js.Conn().MaxPayload() ||
		facts.maxSize > 0 && size > facts.maxSize ||
		hdr+batchHeaderRoom > maxHeaderBytes
}

// publishBatch publishes the messages msgs[chunk] as one atomic batch and
// waits for the commit's acknowledgement.
//
// The Publisher's batches open at once, over all its calls, are at most
// MaxBatches: the relay runs several calls at a time (Concurrency), and the
// server refuses batches beyond its limit per stream.
func (p *Publisher) publishBatch(ctx context.Context, lk *lookups, msgs []courier.Message, chunk []int) (batchAction, error) {
	select {
	case p.open <- struct{}{}:
		defer func() { <-p.open }()
	case <-ctx.Done():
		return batchFailed, broker.Unavailable(fmt.Errorf("waiting to open a batch: %w", ctx.Err()))
	}
	id := uuid.NewString()
	nc := p.js.Conn()
	first := &msgs[chunk[0]]
	last := len(chunk) - 1
	for n, i := range chunk {
		nm := p.toNATS(&msgs[i])
		nm.Header[headerBatchID] = []string{id}
		nm.Header[headerBatchSeq] = []string{strconv.Itoa(n + 1)}
		if n < last {
			if err := nc.PublishMsg(nm); err != nil {
				return p.unsent(&msgs[i], err)
			}
			continue
		}
		nm.Header[headerBatchCommit] = []string{"1"}
		f, err := p.js.PublishMsgAsync(nm, jetstream.WithRetryAttempts(0))
		if err != nil {
			return p.unsent(&msgs[i], err)
		}
		switch _, refused, err := p.wait(ctx, lk, first, f); {
		case refused:
			return p.batchRefusal(first, len(chunk), err)
		case err != nil:
			return batchFailed, err
		}
		return batchStored, nil
	}
	return batchStored, nil
}

// unsent sorts the error of a batch's message the client did not send: the
// connection's failures stop the run, the message's own send it one by one
// (where it gets its verdict alone).
func (p *Publisher) unsent(m *courier.Message, err error) (batchAction, error) {
	if c := p.classify(m, err); errors.Is(c, broker.ErrUnavailable) {
		return batchFailed, c
	}
	return batchOneByOne, nil
}

// batchRefusal sorts JetStream's refusal of an atomic batch of sent
// messages whose first is m. Nothing of the batch is stored. The refusals of batches
// themselves (a message id the stream holds, a message gone missing, a
// batch too large, too many open, a stream that no longer allows atomic
// publish) decide how the run goes on; the rest are classified as for one
// message (classify): the broker's failures stop the run, and the others,
// which may be any message's fault, send the batch one by one.
func (p *Publisher) batchRefusal(m *courier.Message, sent int, err error) (batchAction, error) {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case errCodeBatchDuplicateMsgID:
			return batchDuplicate, nil
		case errCodeBatchIncomplete, errCodeBatchMissingSeq:
			return batchOneByOne, nil
		case errCodeBatchUnsupportedHeader:
			// nats-server 2.12.0 takes no Nats-Msg-Id in a batch: no
			// batches on this connection, then. Another header (a
			// message's own Nats-Expected-Last-Msg-Id) is that
			// message's business: one by one, it gets its verdict.
			if !strings.Contains(apiErr.Description, jetstream.MsgIDHeader) {
				return batchOneByOne, nil
			}
			p.refused.Store(true)
			return batchNoAtomic, nil
		case errCodeBatchDisabled:
			p.forgetFacts(p.cfg.Subject(m.Topic))
			return batchNoAtomic, nil
		case errCodeBatchTooLarge:
			if p.lowerBatchSize(apiErr.Description, sent) < 2 {
				return batchNoAtomic, nil
			}
			return batchRetry, nil
		case errCodeBatchTooManyInflight:
			return batchBusy, err
		}
	}
	if c := p.classify(m, err); errors.Is(c, broker.ErrUnavailable) {
		return batchFailed, c
	}
	return batchOneByOne, nil
}

// lowerBatchSize takes the server's limit of messages in a batch from desc,
// the description of its refusal of a batch of sent messages ("atomic
// publish batch is too large: 100"), or half of sent when it says none, and
// makes it the Publisher's batch size if that is smaller. It returns the
// size.
func (p *Publisher) lowerBatchSize(desc string, sent int) int64 {
	limit := int64(sent / 2)
	if i := strings.LastIndexByte(desc, ' '); i >= 0 {
		if n, err := strconv.ParseInt(desc[i+1:], 10, 64); err == nil && n > 0 && n < int64(sent) {
			limit = n
		}
	}
	for {
		size := p.size.Load()
		if size <= limit || p.size.CompareAndSwap(size, limit) {
			return min(size, limit)
		}
	}
}

// publishOne publishes m alone and waits for its acknowledgement.
func (p *Publisher) publishOne(ctx context.Context, lk *lookups, m *courier.Message) (*jetstream.PubAck, error) {
	f, err := p.js.PublishMsgAsync(p.toNATS(m), jetstream.WithRetryAttempts(0))
	if err != nil {
		return nil, p.classify(m, err)
	}
	return p.await(ctx, lk, m, f)
}

// holdBack fails the messages msgs[rest], the messages of a key after one
// that failed with cause: they are not stored (broker.OrderKeeper), and not
// their fault.
func (p *Publisher) holdBack(msgs []courier.Message, rest []int, errs []error, cause error) {
	for _, i := range rest {
		errs[i] = broker.Unavailable(fmt.Errorf("subject %q: held back: an earlier message of key %q failed: %v",
			p.cfg.MessageSubject(msgs[i].Topic, msgs[i].Key), msgs[i].Key, cause))
	}
}
