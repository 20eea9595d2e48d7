package inbox

import (
	"context"
	"fmt"

	"github.com/courier-go/courier"
)

// Router dispatches messages to handlers by type. Build it before the
// consumer starts; it is not safe to register handlers while handling.
type Router[TTx any] struct {
	handlers map[string]Handler[TTx]
	fallback Handler[TTx]
}

// NewRouter returns an empty router.
func NewRouter[TTx any]() *Router[TTx] {
	return &Router[TTx]{handlers: map[string]Handler[TTx]{}}
}

// Handle registers h for messages of type typ, replacing an earlier one.
func (r *Router[TTx]) Handle(typ string, h Handler[TTx]) { r.handlers[typ] = h }

// Default registers h for types without a handler of their own. Without a
// default, a message of an unknown type is malformed (parked at once).
func (r *Router[TTx]) Default(h Handler[TTx]) { r.fallback = h }

// On registers fn for messages of T's type (courier.TypeName of a T: its
// MessageType method, or its Go type name), decoding their JSON payload into
// a T first. A payload that does not decode makes the message malformed.
func On[T any, TTx any](r *Router[TTx], fn func(ctx context.Context, tx TTx, msg courier.Message, v T) error) {
	var zero T
	OnType(r, courier.TypeName(zero), fn)
}

// OnType is On for an explicit type name.
func OnType[T any, TTx any](r *Router[TTx], typ string, fn func(ctx context.Context, tx TTx, msg courier.Message, v T) error) {
	r.Handle(typ, func(ctx context.Context, tx TTx, msg courier.Message) error {
		var v T
		if err := msg.DecodeJSON(&v); err != nil {
			return fmt.Errorf("%w: %w", courier.ErrMalformed, err)
		}
		return fn(ctx, tx, msg, v)
	})
}

// Handler returns the dispatching handler.
func (r *Router[TTx]) Handler() Handler[TTx] {
	return func(ctx context.Context, tx TTx, msg courier.Message) error {
		h, ok := r.handlers[msg.Type]
		if !ok {
			h = r.fallback
		}
		if h == nil {
			return fmt.Errorf("%w: no handler for message type %q", courier.ErrMalformed, msg.Type)
		}
		return h(ctx, tx, msg)
	}
}
