package nats

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
)

// lookups asks JetStream, for one Publish call, which stream binds a
// subject, at most once per subject, and gives up asking after the first
// lookup that went unanswered.
type lookups struct {
	p       *Publisher
	mu      sync.Mutex // several keys' runs ask at once
	answers map[string]lookup
	silent  error // the first unanswered lookup's error
}

// lookup is JetStream's answer about one subject.
type lookup struct {
	stream string // the stream that binds it, if any
	err    error  // nil, jetstream.ErrStreamNotFound, jetstream.ErrInvalidSubject, or no answer
}

func (l *lookups) ask(ctx context.Context, subject string) lookup {
	l.mu.Lock()
	defer l.mu.Unlock()
	if a, ok := l.answers[subject]; ok {
		return a
	}
	if l.silent != nil {
		return lookup{err: l.silent}
	}
	// Bounded on its own: a publish that timed out may have used up ctx,
	// and the answer decides whether the failure counts.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.p.lookup)
	stream, err := l.p.js.StreamNameBySubject(lctx, subject)
	cancel()
	a := lookup{stream: stream, err: err}
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) && !errors.Is(err, jetstream.ErrInvalidSubject) {
		l.silent = err
	}
	if l.answers == nil {
		l.answers = make(map[string]lookup)
	}
	l.answers[subject] = a
	return a
}

// preflight returns an ErrNoStream error when JetStream says no stream
// binds m's subject, a rejection when the subject is invalid, nil
// otherwise (the publish then goes ahead).
func (l *lookups) preflight(ctx context.Context, m *courier.Message) error {
	if ctx.Err() != nil {
		return nil
	}
	subject, topic := l.p.cfg.MessageSubject(m.Topic, m.Key), m.Topic
	switch a := l.ask(ctx, subject); {
	case errors.Is(a.err, jetstream.ErrStreamNotFound):
		return noStream(subject, topic)
	case errors.Is(a.err, jetstream.ErrInvalidSubject):
		return badSubject(subject, topic, a.err)
	}
	return nil
}

// verdict classifies pubErr, a publish no stream answered.
func (l *lookups) verdict(ctx context.Context, m *courier.Message, pubErr error) error {
	subject, topic := l.p.cfg.MessageSubject(m.Topic, m.Key), m.Topic
	a := l.ask(ctx, subject)
	switch {
	case a.err == nil:
		return broker.Unavailable(fmt.Errorf("subject %q: stream %s binds it but did not acknowledge: %w (stream not ready, without a leader, or overloaded)",
			subject, a.stream, pubErr))
	case errors.Is(a.err, jetstream.ErrStreamNotFound):
		return noStream(subject, topic)
	case errors.Is(a.err, jetstream.ErrInvalidSubject):
		return badSubject(subject, topic, a.err)
	default:
		return broker.Unavailable(fmt.Errorf("subject %q: %w; JetStream did not say which stream binds it either (%w): is JetStream enabled and ready?",
			subject, pubErr, a.err))
	}
}

func noStream(subject, topic string) error {
	return fmt.Errorf("%w %q (topic %q): bind a stream to it (add the subject to a stream's subjects, see EnsureStream) or check the message's topic",
		ErrNoStream, subject, topic)
}

func badSubject(subject, topic string, err error) error {
	return broker.Rejected(fmt.Errorf("subject %q (topic %q) is not a valid NATS subject (%w): use a topic of dot-separated tokens without white space or wildcards, and check the subject prefix",
		subject, topic, err))
}
