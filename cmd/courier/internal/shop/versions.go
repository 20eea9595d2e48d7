package shop

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/store"
)

// ChargeStats counts what payment did with each version of
// ChargeRequested: how a deploy of version 2 went. The counts are kept in
// memory as the inbox consumer reports its runs (inbox.Observer): a run
// whose commit a crash cut short goes uncounted although it was applied,
// and a copy the chaos broker made of a parked request may be parked and
// replayed too. The databases are the record; the audit reads those.
type ChargeStats struct {
	// V1 counts the version 1 requests applied by a payment that knew
	// only version 1.
	V1 int64
	// Upcast counts the version 1 requests applied by a payment that
	// knows version 2, through its upcaster.
	Upcast int64
	// V2 counts the version 2 requests applied as they arrived.
	V2 int64
	// Waited counts the version 2 requests a payment that knew only
	// version 1 received, and WaitRuns its runs of them: each failed with
	// courier.ErrNewerVersion and was retried without counting toward
	// MaxDeliveries.
	Waited, WaitRuns int64
	// Parked counts the deliveries parked as newer than payment knew
	// (store.ReasonNewerVersion): they waited NewerVersionWait.
	Parked int64
	// Replayed counts the parked requests applied on replay.
	Replayed int64
}

func (c ChargeStats) add(o ChargeStats) ChargeStats {
	c.V1 += o.V1
	c.Upcast += o.Upcast
	c.V2 += o.V2
	c.Waited += o.Waited
	c.WaitRuns += o.WaitRuns
	c.Parked += o.Parked
	c.Replayed += o.Replayed
	return c
}

// chargeType is ChargeRequested's message type, the same in every version.
var chargeType = courier.TypeName(ChargeRequested{})

// chargeCounter keeps a service's ChargeStats over its instances and
// incarnations.
type chargeCounter struct {
	v1, upcast, v2, waitRuns, parked atomic.Int64

	mu     sync.Mutex
	waited map[uuid.UUID]bool
	// replayed are the messages replayed: the instances of a consumer each
	// replay what an operator asked to (the inbox applies it once), and
	// each tells its observer, so a message is counted once by its id.
	replayed map[uuid.UUID]bool
}

func (c *chargeCounter) stats() ChargeStats {
	c.mu.Lock()
	waited, replayed := len(c.waited), len(c.replayed)
	c.mu.Unlock()
	return ChargeStats{V1: c.v1.Load(), Upcast: c.upcast.Load(), V2: c.v2.Load(), Waited: int64(waited),
		WaitRuns: c.waitRuns.Load(), Parked: c.parked.Load(), Replayed: int64(replayed)}
}

// observer returns the inbox observer of an incarnation that knows
// ChargeRequested up to version knows. It sees each message as it
// arrived, before the router upcast it.
func (c *chargeCounter) observer(knows int) inbox.Observer {
	return &chargeObserver{c: c, knows: knows}
}

type chargeObserver struct {
	inbox.NopObserver
	c     *chargeCounter
	knows int
}

func (o *chargeObserver) Handled(_ string, msg courier.Message, res inbox.Result, err error, _ time.Duration) {
	if msg.Type != chargeType {
		return
	}
	switch {
	case errors.Is(err, courier.ErrNewerVersion):
		o.c.waitRuns.Add(1)
		o.c.mu.Lock()
		if o.c.waited == nil {
			o.c.waited = map[uuid.UUID]bool{}
		}
		o.c.waited[msg.ID] = true
		o.c.mu.Unlock()
	case err != nil || res != inbox.Applied:
	case msg.Version >= 2:
		o.c.v2.Add(1)
	case o.knows >= 2:
		o.c.upcast.Add(1)
	default:
		o.c.v1.Add(1)
	}
}

func (o *chargeObserver) Parked(_, reason string) {
	if reason == store.ReasonNewerVersion {
		o.c.parked.Add(1)
	}
}

func (o *chargeObserver) Replayed(_ string, msg courier.Message) {
	if msg.Type != chargeType {
		return
	}
	o.c.mu.Lock()
	defer o.c.mu.Unlock()
	if o.c.replayed == nil {
		o.c.replayed = map[uuid.UUID]bool{}
	}
	o.c.replayed[msg.ID] = true
}
