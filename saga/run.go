package saga

import (
	"context"
	"errors"
	"time"

	"github.com/courier-go/courier"
)

// Expire fires the deadlines that have passed, each in a transaction of its
// own, and returns how many instances it moved. A step that timed out is
// compensated (together with the steps before it), or sent again if it is
// retriable; a compensation that timed out is sent again. A reply arriving
// after its step timed out is then ignored as late.
func (o *Orchestrator[D, TTx]) Expire(ctx context.Context) (int, error) {
	ids, err := o.st.Due(ctx, o.def.Type, o.now.Now().UTC(), 100)
	if err != nil {
		return 0, err
	}
	moved := 0
	for _, id := range ids {
		err := o.st.InTx(ctx, func(tx TTx) error { return o.expire(ctx, tx, id) })
		switch {
		case err == nil:
			moved++
		case errors.Is(err, ErrConflict): // a reply got there first; look again next round
		default:
			return moved, err
		}
	}
	return moved, nil
}

func (o *Orchestrator[D, TTx]) expire(ctx context.Context, tx TTx, id string) error {
	rec, err := o.st.Load(ctx, tx, o.def.Type, id)
	if err != nil {
		return err
	}
	now := o.now.Now().UTC()
	if rec.Deadline == nil || rec.Deadline.After(now) || rec.Phase == Completed || rec.Phase == Cancelled {
		return nil
	}
	in, err := o.decode(rec)
	if err != nil {
		return err
	}
	version := rec.Version
	s := o.def.Steps[rec.Step]
	ev := courier.Message{Type: "Timeout " + s.Name}
	switch {
	case rec.Phase == Compensating:
		ev.Type = "Timeout compensating " + s.Name
		if err := o.send(ctx, tx, in, s.Compensate, nil); err != nil {
			return err
		}
		in.rec.Deadline = o.deadline(resendWait(s.CompensationTimeout, in.rec.Attempts))
		if err := o.record(ctx, tx, in, ev, rec.State, rec.State, "applied", "compensation of "+s.Name+" sent again"); err != nil {
			return err
		}
	case s.Retriable:
		if err := o.resend(ctx, tx, in, ev, s.Name+" timed out"); err != nil {
			return err
		}
	default:
		// The step may or may not have taken effect: compensate it too.
		if err := o.compensate(ctx, tx, in, ev, s.Name+" timed out", rec.Step); err != nil {
			return err
		}
	}
	o.log.Warn("deadline passed", "saga_id", id, "step", s.Name, "phase", rec.Phase, "now", in.rec.State)
	return o.save(ctx, tx, in, version)
}

// maxResendBackoff caps how many times longer than its timeout a command
// sent again waits for its reply.
const maxResendBackoff = 64

// resendWait is how long the attempts-th send of a command waits for its
// reply: timeout, then twice as long after each send, up to
// maxResendBackoff times timeout. A receiver that is slow (overloaded,
// retrying, restarting) is not flooded with copies it would only have to
// skip.
func resendWait(timeout time.Duration, attempts int) time.Duration {
	return courier.Backoff{Initial: timeout, Max: maxResendBackoff * timeout}.Delay(attempts)
}

// Run fires deadlines every interval until ctx ends; errors are logged.
func (o *Orchestrator[D, TTx]) Run(ctx context.Context, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if _, err := o.Expire(ctx); err != nil && ctx.Err() == nil {
				o.log.Warn("firing saga deadlines failed", "error", err)
			}
		}
	}
}

// Get returns instance id with its history, or an error wrapping
// store.ErrNotFound.
func (o *Orchestrator[D, TTx]) Get(ctx context.Context, id string) (*Instance[D], error) {
	var out *Instance[D]
	err := o.st.InTx(ctx, func(tx TTx) error {
		rec, err := o.st.Load(ctx, tx, o.def.Type, id)
		if err != nil {
			return err
		}
		in, err := o.decode(rec)
		if err != nil {
			return err
		}
		out = o.public(in)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if out.History, err = o.st.History(ctx, o.def.Type, id); err != nil {
		return nil, err
	}
	return out, nil
}
