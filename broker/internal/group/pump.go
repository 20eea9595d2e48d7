package group

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// ErrLost is returned by a Pump's receive function when the partition is
// gone from under it (its consumer deleted, its channel closed): the pump
// stops, and Lost says so.
var ErrLost = errors.New("group: partition lost")

// Pump hands one held partition's deliveries on to the subscriber's Next,
// one at a time, in the order received, and counts those handed out and not
// yet settled (acknowledged, dropped, retried), so that giving the
// partition up can wait for them.
type Pump struct {
	stop chan struct{}
	done chan struct{}
	lost atomic.Bool
	out  atomic.Int64
}

// StartPump starts a pump of a partition: it calls recv for each delivery
// and sends what wrap makes of it, with a Ticket to settle it by, on to,
// until Stop, or until recv returns an error: ErrLost (Lost then reports
// true), or any other to end. recv is given the pump's stop channel, closed
// by Stop, and must return (an error) once it is closed.
func StartPump[M, D any](recv func(stop <-chan struct{}) (M, error), wrap func(M, *Ticket) D, to chan<- D) *Pump {
	p := &Pump{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			m, err := recv(p.stop)
			switch {
			case errors.Is(err, ErrLost):
				p.lost.Store(true)
				return
			case err != nil:
				return
			}
			p.out.Add(1)
			select {
			case to <- wrap(m, &Ticket{pump: p}):
			case <-p.stop:
				p.out.Add(-1)
				return
			}
		}
	}()
	return p
}

// Stop stops the pump and returns once it has: nothing more is handed on.
// What it received and did not hand on stays with the broker. It may be
// called more than once.
func (p *Pump) Stop() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
}

// Lost reports whether the partition was lost from under the pump.
func (p *Pump) Lost() bool { return p.lost.Load() }

// MarkLost records that the partition was lost (a check found its consumer
// gone).
func (p *Pump) MarkLost() { p.lost.Store(true) }

// Drain waits until every delivery handed on was settled, the partition was
// lost, ctx ended or max passed, and reports whether all were settled.
func (p *Pump) Drain(ctx context.Context, max time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, max)
	defer cancel()
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	for p.out.Load() > 0 {
		if p.Lost() {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}

// drainPoll spaces the looks at a partition being given up.
const drainPoll = 5 * time.Millisecond

// Ticket goes with one delivery a Pump handed on: settling it tells the
// pump the delivery is done with.
type Ticket struct {
	pump    *Pump
	settled atomic.Bool
}

// Settle records the delivery settled, once; nil does nothing (a delivery
// of no partition).
func (t *Ticket) Settle() {
	if t != nil && t.settled.CompareAndSwap(false, true) {
		t.pump.out.Add(-1)
	}
}
