package inbox

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/courier-go/courier"
)

// Router dispatches messages to handlers by type and version. Build it
// before the consumer starts; it is not safe to register handlers while
// handling.
//
// A message goes to the handler of its type and version; failing that, an
// upcaster of its version turns it into a later one and the search goes on
// from there; failing that, to the handler of every version of its type
// (Handle). A message of a type the router knows but of a version newer
// than any it knows (the producer was deployed first) is neither handled
// nor lost: the handler returns an error wrapping courier.ErrNewerVersion,
// which the Consumer retries, uncounted, for ConsumerConfig.NewerVersionWait,
// then parks for a replay once the consumer knows the version. One older
// than every handler and upcaster knows is malformed (parked at once),
// named with the versions the router knows.
type Router[TTx any] struct {
	handlers  map[string]Handler[TTx]      // every version of a type
	versions  map[typeVersion]Handler[TTx] // one version of a type
	upcasters map[typeVersion]Upcaster     // one version of a type, into a later one
	known     map[string][]int             // the versions of each type handled or upcast to
	batches   map[typeVersion]BatchHandler[TTx]
	fallback  Handler[TTx]
}

// BatchHandler applies msgs, messages of one type and version, inside tx,
// the transaction that also records their inbox markers: for a bulk
// insert, say, a statement for the lot. Each message is applied once: msgs
// holds only messages this consumer has not applied, in the order their
// Consumer received them (with KeepOrder, each key's in its order).
// Returning an error rolls the whole group back; each of msgs then runs
// alone (a slice of one), under the usual failure rules, so that the one
// that fails is found and the others applied. An error wrapping
// courier.ErrMalformed or courier.ErrNewerVersion means what it means for
// a Handler.
type BatchHandler[TTx any] func(ctx context.Context, tx TTx, msgs []courier.Message) error

// typeVersion is one version of a message type.
type typeVersion struct {
	typ     string
	version int
}

// Upcaster turns a message of one version of its type into a later version
// of the same type: the payload in the later shape, Version the later one
// (the rest as it was). An error fails the run as a handler's error does;
// one wrapping courier.ErrMalformed parks the message at once.
type Upcaster func(msg courier.Message) (courier.Message, error)

// NewRouter returns an empty router.
func NewRouter[TTx any]() *Router[TTx] {
	return &Router[TTx]{handlers: map[string]Handler[TTx]{}, versions: map[typeVersion]Handler[TTx]{},
		upcasters: map[typeVersion]Upcaster{}, known: map[string][]int{}, batches: map[typeVersion]BatchHandler[TTx]{}}
}

// HandleBatch registers h for messages of type typ and version version,
// replacing an earlier handler of them. A Consumer built with
// NewRouterConsumer hands h the messages of a group (ConsumerConfig.Group)
// of that type and version at once; a message handled alone, or by the
// router's Handler, goes to h in a slice of one. It panics if version is
// below 1.
func (r *Router[TTx]) HandleBatch(typ string, version int, h BatchHandler[TTx]) {
	r.HandleVersion(typ, version, func(ctx context.Context, tx TTx, msg courier.Message) error {
		return h(ctx, tx, []courier.Message{msg})
	})
	r.batches[typeVersion{typ, version}] = h
}

// OnBatch registers fn for the messages of T's type and version
// (courier.TypeName and courier.VersionOf of a T) as a BatchHandler,
// decoding each JSON payload into a T first: vs[i] is msgs[i]'s. A payload
// that does not decode makes its message malformed: alone, it is parked;
// in a batch, the batch runs again without it.
func OnBatch[T any, TTx any](r *Router[TTx], fn func(ctx context.Context, tx TTx, msgs []courier.Message, vs []T) error) {
	var zero T
	r.HandleBatch(courier.TypeName(zero), courier.VersionOf(zero), func(ctx context.Context, tx TTx, msgs []courier.Message) error {
		vs := make([]T, len(msgs))
		for i, msg := range msgs {
			if err := msg.DecodeJSON(&vs[i]); err != nil {
				return fmt.Errorf("%w: message %s: %w", courier.ErrMalformed, msg.ID, err)
			}
		}
		return fn(ctx, tx, msgs, vs)
	})
}

// Handle registers h for messages of type typ of every version (those a
// handler or an upcaster of their own does not take), replacing an earlier
// one. h reads msg.Version itself.
func (r *Router[TTx]) Handle(typ string, h Handler[TTx]) { r.handlers[typ] = h }

// HandleVersion registers h for messages of type typ and version version,
// replacing an earlier one. It panics if version is below 1.
func (r *Router[TTx]) HandleVersion(typ string, version int, h Handler[TTx]) {
	checkVersion("HandleVersion", typ, version)
	r.versions[typeVersion{typ, version}] = h
	delete(r.batches, typeVersion{typ, version})
	r.know(typ, version)
}

// UpcastFrom registers up for messages of type typ and version from,
// replacing an earlier one. It panics if from is below 1. A handler of
// version from itself wins over up.
func (r *Router[TTx]) UpcastFrom(typ string, from int, up Upcaster) {
	checkVersion("UpcastFrom", typ, from)
	r.upcasters[typeVersion{typ, from}] = up
	r.know(typ, from)
}

// Default registers h for types without a handler of their own. Without a
// default, a message of an unknown type is malformed (parked at once). A
// newer version of a type the router knows does not go to the default.
func (r *Router[TTx]) Default(h Handler[TTx]) { r.fallback = h }

// On registers fn for messages of T's type and version (courier.TypeName
// and courier.VersionOf of a T: its MessageType and MessageVersion methods,
// or its Go type name and 1), decoding their JSON payload into a T first.
// A payload that does not decode makes the message malformed.
func On[T any, TTx any](r *Router[TTx], fn func(ctx context.Context, tx TTx, msg courier.Message, v T) error) {
	var zero T
	OnType(r, courier.TypeName(zero), fn)
}

// OnType is On for an explicit type name; the version is still T's.
func OnType[T any, TTx any](r *Router[TTx], typ string, fn func(ctx context.Context, tx TTx, msg courier.Message, v T) error) {
	var zero T
	r.HandleVersion(typ, courier.VersionOf(zero), func(ctx context.Context, tx TTx, msg courier.Message) error {
		var v T
		if err := msg.DecodeJSON(&v); err != nil {
			return fmt.Errorf("%w: %w", courier.ErrMalformed, err)
		}
		return fn(ctx, tx, msg, v)
	})
}

// Upcast registers fn as the upcaster of From's version of its type into
// To's (courier.TypeName and courier.VersionOf of each): the JSON payload
// decodes into a From, and fn's To, encoded as JSON, is the payload the
// next handler or upcaster sees. Register one per old version (v1 to v2,
// v2 to v3) and one handler of the newest: it sees every message in the
// newest shape. A payload that does not decode makes the message
// malformed. It panics unless From and To name the same type and To's
// version is later than From's.
func Upcast[From, To any, TTx any](r *Router[TTx], fn func(From) (To, error)) {
	var from From
	var to To
	typ, fromV, toV := courier.TypeName(from), courier.VersionOf(from), courier.VersionOf(to)
	if courier.TypeName(to) != typ || toV <= fromV {
		panic(fmt.Sprintf("inbox: Upcast from %T (%s version %d) to %T (%s version %d): an upcaster turns one version of a type into a later one of the same type",
			from, typ, fromV, to, courier.TypeName(to), toV))
	}
	r.UpcastFrom(typ, fromV, func(msg courier.Message) (courier.Message, error) {
		var v From
		if err := msg.DecodeJSON(&v); err != nil {
			return msg, fmt.Errorf("%w: %w", courier.ErrMalformed, err)
		}
		out, err := fn(v)
		if err != nil {
			return msg, fmt.Errorf("upcast %s version %d to %d: %w", typ, fromV, toV, err)
		}
		payload, err := json.Marshal(out)
		if err != nil {
			return msg, fmt.Errorf("upcast %s version %d to %d: encode %T as JSON: %w", typ, fromV, toV, out, err)
		}
		msg.Payload, msg.Version, msg.ContentType = payload, toV, courier.ContentTypeJSON
		return msg, nil
	})
	r.know(typ, toV)
}

// Handler returns the dispatching handler.
func (r *Router[TTx]) Handler() Handler[TTx] {
	return func(ctx context.Context, tx TTx, msg courier.Message) error {
		msg, h, err := r.route(msg)
		if err != nil {
			return err
		}
		return h(ctx, tx, msg)
	}
}

// batchOf returns msg as the batch handler of its type and version takes
// it (upcast), that handler and its type and version, when it has one;
// ok is false otherwise, or when routing it fails (its run alone returns
// the error).
func (r *Router[TTx]) batchOf(msg courier.Message) (out courier.Message, h BatchHandler[TTx], tv typeVersion, ok bool) {
	if len(r.batches) == 0 {
		return msg, nil, tv, false
	}
	out, _, err := r.route(msg)
	if err != nil {
		return msg, nil, tv, false
	}
	tv = typeVersion{out.Type, out.Version}
	h, ok = r.batches[tv]
	return out, h, tv, ok
}

// route finds msg's handler, upcasting msg on the way.
func (r *Router[TTx]) route(msg courier.Message) (courier.Message, Handler[TTx], error) {
	for {
		if h, ok := r.versions[typeVersion{msg.Type, msg.Version}]; ok {
			return msg, h, nil
		}
		up, ok := r.upcasters[typeVersion{msg.Type, msg.Version}]
		if !ok {
			break
		}
		next, err := up(msg)
		if err != nil {
			return msg, nil, err
		}
		if next.Type != msg.Type || next.Version <= msg.Version {
			return msg, nil, fmt.Errorf("inbox: the upcaster of %s version %d returned %s version %d: it must return a later version of the same type",
				msg.Type, msg.Version, next.Type, next.Version)
		}
		msg = next
	}
	if h, ok := r.handlers[msg.Type]; ok {
		return msg, h, nil
	}
	if known := r.known[msg.Type]; len(known) > 0 {
		if newest := known[len(known)-1]; msg.Version > newest {
			return msg, nil, fmt.Errorf("%w: %s version %d; this consumer knows versions %v: deploy the consumer that knows it, then replay the message",
				courier.ErrNewerVersion, msg.Type, msg.Version, known)
		}
		return msg, nil, fmt.Errorf("%w: no handler or upcaster for version %d of message type %q (this consumer knows versions %v): register one",
			courier.ErrMalformed, msg.Version, msg.Type, known)
	}
	if r.fallback != nil {
		return msg, r.fallback, nil
	}
	return msg, nil, fmt.Errorf("%w: no handler for message type %q", courier.ErrMalformed, msg.Type)
}

// know records that the router handles or upcasts to version of typ.
func (r *Router[TTx]) know(typ string, version int) {
	if k := r.known[typ]; !slices.Contains(k, version) {
		k = append(k, version)
		slices.Sort(k)
		r.known[typ] = k
	}
}

// checkVersion panics when version cannot be a message's version.
func checkVersion(fn, typ string, version int) {
	if version < 1 {
		panic(fmt.Sprintf("inbox: %s(%q, %d): versions start at 1", fn, typ, version))
	}
}
