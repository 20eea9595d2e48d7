package saga_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/saga"
)

// world is the services of one order, modelled the way the shop's are:
// idempotent by order, so a command sent again has no second effect.
type world struct {
	declines, noStock, shipFails bool
	charged, refunded            int
	reserved, released           int
	shipped, shipCancelled       int
	sent                         map[string]int // commands the saga sent, by type
}

// serve applies one command and returns the service's reply.
func (w *world) serve(id, typ string) courier.Message {
	w.sent[typ]++
	switch typ {
	case "ChargeRequested":
		if w.declines {
			return reply(id, "PaymentDeclined", "", saga.HeaderReason, "card declined")
		}
		w.charged = 1
		return reply(id, "PaymentSucceeded", "ch_"+id)
	case "RefundRequested":
		if w.charged == 1 {
			w.refunded = 1
		}
		return reply(id, "PaymentRefunded", "")
	case "ReserveStock":
		if w.noStock {
			return reply(id, "StockUnavailable", "", saga.HeaderReason, "out of stock")
		}
		w.reserved = 1
		return reply(id, "StockReserved", "")
	case "ReleaseStock":
		if w.reserved == 1 {
			w.released = 1
		}
		return reply(id, "StockReleased", "")
	case "PrepareShipment":
		if w.shipFails {
			return reply(id, "ShipmentFailed", "", saga.HeaderReason, "no courier")
		}
		w.shipped = 1
		return reply(id, "ShipmentPrepared", "")
	case "CancelShipment":
		if w.shipped == 1 {
			w.shipCancelled = 1
		}
		return reply(id, "ShipmentCancelled", "")
	}
	panic("unknown command " + typ)
}

// Random duplicated, reordered, delayed and missing replies: every saga ends
// in a terminal state, no step runs twice, every compensation at most once,
// and the end state matches the effects.
func TestPropertySagaConverges(t *testing.T) {
	for _, d := range []string{"sqlite", "postgres"} {
		t.Run(d, func(t *testing.T) { propertySagaConverges(t, newFixture(t, d)) })
	}
}

func propertySagaConverges(t *testing.T, f *fixture) {
	n := 0
	rapid.Check(t, func(rt *rapid.T) {
		n++
		id := fmt.Sprintf("p%d", n)
		w := &world{
			declines:  rapid.Float64Range(0, 1).Draw(rt, "p-decline") < 0.2,
			noStock:   rapid.Float64Range(0, 1).Draw(rt, "p-nostock") < 0.2,
			shipFails: rapid.Float64Range(0, 1).Draw(rt, "p-shipfail") < 0.2,
			sent:      map[string]int{},
		}
		f.start(id, 100)
		var commands []string
		var events []courier.Message
		take := func() { commands = append(commands, f.commands(id)...) }
		take()
		steps := rapid.IntRange(0, 40).Draw(rt, "steps")
		for range steps {
			switch rapid.IntRange(0, 5).Draw(rt, "action") {
			case 0: // a service handles the oldest command; its reply may be lost
				if len(commands) > 0 {
					r := w.serve(id, commands[0])
					commands = commands[1:]
					if !rapid.Bool().Draw(rt, "lose-reply") {
						events = append(events, r)
					}
				}
			case 1, 2: // any reply arrives, not necessarily the oldest
				if len(events) > 0 {
					i := rapid.IntRange(0, len(events)-1).Draw(rt, "event")
					f.handle(events[i])
					events = append(events[:i], events[i+1:]...)
					take()
				}
			case 3: // a reply arrives twice
				if len(events) > 0 {
					i := rapid.IntRange(0, len(events)-1).Draw(rt, "dup")
					f.handle(events[i])
					take()
				}
			case 4: // time passes; deadlines fire
				f.advance(time.Duration(rapid.IntRange(1, 15).Draw(rt, "seconds")) * time.Second)
				_, err := f.orch.Expire(context.Background())
				if err != nil {
					rt.Fatalf("expire: %v", err)
				}
				take()
			case 5: // a reply is lost
				if len(events) > 0 {
					i := rapid.IntRange(0, len(events)-1).Draw(rt, "drop")
					events = append(events[:i], events[i+1:]...)
				}
			}
		}
		// Then the network heals: everything is delivered, time moves on.
		for round := 0; ; round++ {
			if in := f.get(id); in.Phase == saga.Completed || in.Phase == saga.Cancelled {
				break
			}
			if round == 50 {
				rt.Fatalf("saga %s stuck in %s after the network healed", id, f.get(id).State)
			}
			for len(commands) > 0 {
				events = append(events, w.serve(id, commands[0]))
				commands = commands[1:]
			}
			for len(events) > 0 {
				f.handle(events[0])
				events = events[1:]
				take()
			}
			f.advance(11 * time.Second)
			if _, err := f.orch.Expire(context.Background()); err != nil {
				rt.Fatalf("expire: %v", err)
			}
			take()
		}
		in := f.get(id)
		for _, step := range []string{"ChargeRequested", "ReserveStock", "PrepareShipment"} {
			if w.sent[step] > 1 {
				rt.Fatalf("%s sent %d times", step, w.sent[step])
			}
		}
		switch in.Phase {
		case saga.Completed:
			if w.charged != 1 || w.refunded != 0 || w.reserved != 1 || w.released != 0 || w.shipped != 1 || w.shipCancelled != 0 {
				rt.Fatalf("completed saga with effects %+v", w)
			}
		case saga.Cancelled:
			if w.charged != w.refunded || w.reserved != w.released || w.shipped != w.shipCancelled {
				rt.Fatalf("cancelled saga left effects behind: %+v (reason %s)", w, in.Reason)
			}
		}
		// Nothing happens to a finished saga.
		for _, h := range in.History {
			if h.Outcome == "applied" && (h.From == "ShippingReady" || h.From == "Cancelled") {
				rt.Fatalf("transition after the end: %+v", h)
			}
		}
	})
}
