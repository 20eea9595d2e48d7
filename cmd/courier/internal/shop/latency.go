package shop

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/courier-go/courier/latency"
)

// recorder is an incarnation's latency recorder (Config.LatencyEvery): it
// observes the service's consumer and records in the service's database.
type recorder struct {
	*latency.Recorder
}

// newRecorder returns the incarnation's recorder, nil when
// Config.LatencyEvery is 0.
func (b *base) newRecorder(db *serviceDB, log *slog.Logger) (*recorder, error) {
	if b.cfg.LatencyEvery == 0 {
		return nil, nil
	}
	r, err := latency.NewRecorder(latency.Config{Delivery: db.Delivery(), FlushEvery: b.cfg.LatencyEvery, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("shop %s: %w", b.name, err)
	}
	return &recorder{r}, nil
}

// start runs the recorder until the function it returns is called, which
// waits for its last flush: call it once the consumer has stopped, so that
// the flush counts the messages applied while it drained. A nil recorder
// starts nothing.
func (r *recorder) start(ctx context.Context) (stop func()) {
	if r == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}
