package nats

import (
	"context"
	"errors"
	"fmt"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// EnsureStream creates the stream if no stream of that name exists. An
// existing stream is left as it is (its settings are the operator's), and so
// is a stream that another process creates at the same moment: to let an
// existing stream take atomic batches, update it (nats stream edit NAME
// --allow-batch, or jetstream.StreamConfig.AllowAtomicPublish). It fails
// without touching the server when mapping or cfg is invalid (see
// StreamConfig.Validate).
func EnsureStream(ctx context.Context, nc *natsgo.Conn, mapping Config, cfg StreamConfig) error {
	if err := mapping.Validate(); err != nil {
		return err
	}
	cfg.setDefaults(mapping)
	if err := cfg.validate(); err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("nats: jetstream: %w", err)
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
