package nats

import (
	"context"
	"errors"
	"fmt"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier/internal/redact"
)

// Connect dials a NATS server with the options a relay wants: a name, retries
// for ever after the first connection, and no reconnect buffer, so publishes
// fail fast while the server is away (the relay retries them later) instead of
// piling up in memory. More options may be added; later ones win. The first
// connection attempt fails at once when nothing answers at url.
//
// url may list several servers, comma-separated: give a cluster's client
// connection every node's URL, so that the client fails over to another
// when its server dies. A server that stops answering without closing the
// connection (stalled, or cut off by a partition) is noticed by the client's
// pings: Connect pings every 5 seconds and gives up on the server after two
// unanswered pings (nats.go's default waits 2 minutes between pings), so the
// relay moves to a live node within 10–15 seconds.
func Connect(url string, opts ...natsgo.Option) (*natsgo.Conn, error) {
	base := []natsgo.Option{
		natsgo.Name("courier"),
		natsgo.MaxReconnects(-1),
		natsgo.ReconnectWait(250 * time.Millisecond),
		natsgo.ReconnectBufSize(-1),
		natsgo.Timeout(5 * time.Second),
		natsgo.PingInterval(5 * time.Second),
		natsgo.MaxPingsOutstanding(2),
	}
	nc, err := natsgo.Connect(url, append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("nats: connect to %s: %w", redact.URL(url), err)
	}
	return nc, nil
}

// DefaultStream is the stream EnsureStream creates unless told otherwise.
const DefaultStream = "COURIER"

// StreamConfig describes the stream EnsureStream creates.
type StreamConfig struct {
	// Name of the stream. Default DefaultStream.
	Name string
	// Description is the stream's description when EnsureStream creates
	// it (a program can mark the streams it made with it). Default none.
	Description string
	// Subjects the stream captures. Default: Config.Subjects() of the
	// publisher's subject mapping ("courier.>").
	Subjects []string
	// Duplicates is JetStream's deduplication window for Nats-Msg-Id.
	// Default 2 minutes; make it longer than a relay's lease so that a
	// message re-published after a relay crash is dropped as a duplicate.
	Duplicates time.Duration
	// MaxAge discards messages older than this; 0 keeps them until other
	// limits apply.
	MaxAge time.Duration
	// Memory stores the stream in memory instead of files.
	Memory bool
	// NoAtomicBatches leaves atomic batch publish off. By default a stream
	// created on nats-server 2.12 or later allows it (allow_atomic), so
	// that a Publisher sends a key's run of messages as atomic batches (see
	// Publisher.KeepsKeyOrder); older servers know no such setting and
	// their streams are created without it.
	NoAtomicBatches bool
	// Replicas is how many servers of a cluster hold the stream: 3 (or 5)
	// in production, so that an acknowledgement means a quorum stored the
	// message and the stream survives the loss of a server. Default 1; a
	// single server takes only 1.
	Replicas int
}

// EnsureStream creates the stream if no stream of that name exists. An
// existing stream is left as it is (its settings are the operator's), and so
// is a stream that another process creates at the same moment: to let an
// existing stream take atomic batches, update it (nats stream edit NAME
// --allow-batch, or jetstream.StreamConfig.AllowAtomicPublish).
func EnsureStream(ctx context.Context, nc *natsgo.Conn, mapping Config, cfg StreamConfig) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("nats: jetstream: %w", err)
	}
	if cfg.Name == "" {
		cfg.Name = DefaultStream
	}
	if len(cfg.Subjects) == 0 {
		cfg.Subjects = []string{mapping.Subjects()}
	}
	if cfg.Duplicates == 0 {
		cfg.Duplicates = 2 * time.Minute
	}
	_, err = js.Stream(ctx, cfg.Name)
	if err == nil {
		return nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("nats: look up stream %s: %w", cfg.Name, err)
	}
	storage := jetstream.FileStorage
	if cfg.Memory {
		storage = jetstream.MemoryStorage
	}
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name:        cfg.Name,
		Description: cfg.Description,
		Subjects:    cfg.Subjects,
		Storage:     storage,
		Duplicates:  cfg.Duplicates,
		MaxAge:      cfg.MaxAge,
		// Atomic batches need nats-server 2.12; an older server would
		// not know the setting.
		AllowAtomicPublish: !cfg.NoAtomicBatches && atomicServer(nc.ConnectedServerVersion()),
		Replicas:           cfg.Replicas,
	})
	if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return fmt.Errorf("nats: create stream %s on %v: %w", cfg.Name, cfg.Subjects, err)
	}
	return nil
}
