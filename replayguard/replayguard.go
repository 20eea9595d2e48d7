package replayguard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/courier-go/courier/store"
)

// Letter is one dead letter a run replays.
type Letter struct {
	// Ref is relay:ID or consumer:ID.
	Ref string
	// Relay is true for a relay-side dead letter, false for a parked
	// delivery.
	Relay bool
	// ID is its id on its side.
	ID int64
	// MessageID is its message id (relay side: what Operations.Locate
	// finds it by).
	MessageID string
	// Consumer is, consumer side, the consumer that parked it.
	Consumer string
	// ParkedAt is, consumer side, when it was parked.
	ParkedAt time.Time
}

// Outcome is where a replay stands.
type Outcome int

// The outcomes of a replay.
const (
	// Pending: not published or applied yet, nor failed again.
	Pending Outcome = iota
	// Succeeded: published (relay) or applied (consumer).
	Succeeded
	// FailedAgain: a dead letter again (relay) or still parked, its
	// replay withdrawn by the consumer.
	FailedAgain
)

// Options are a run's guards.
type Options struct {
	// Canary, above 0, replays that many letters first and waits (up to
	// Wait) for their outcome: the run goes on only if every one
	// succeeded.
	Canary int
	// Rate, above 0, is the most replays a second.
	Rate float64
	// StopOnFailure stops the run when a replayed letter fails again.
	StopOnFailure bool
	// Wait is how long the run waits for the outcome of the canary, and
	// at its end for those of the replays it has not seen yet. 0: it does
	// not wait (allowed only without Canary and StopOnFailure).
	Wait time.Duration
}

// Check validates o; the errors name the courier dlq replay flag and the
// fix (the dashboard's fields bear the same names).
func (o Options) Check() error {
	switch {
	case o.Canary < 0:
		return fmt.Errorf("--canary is %d: use the number of dead letters to replay first (1 or more), or 0 for no canary", o.Canary)
	case o.Rate < 0 || math.IsNaN(o.Rate) || math.IsInf(o.Rate, 0):
		return fmt.Errorf("--rate is %v: use replays per second above 0 (such as 50, or 0.5 for one every 2s), or 0 for no limit", o.Rate)
	case o.Wait < 0:
		return fmt.Errorf("--wait is %s: use a duration such as 30s", o.Wait)
	case o.Canary > 0 && o.Wait == 0:
		return errors.New("--canary needs --wait: how long to wait for the canary's outcome before going on, such as --wait 1m")
	case o.StopOnFailure && o.Wait == 0:
		return errors.New("--stop-on-failure needs --wait: how long to watch for a replay failing again once all are replayed, such as --wait 1m")
	}
	return nil
}

// Guarded reports whether o asks for any guard.
func (o Options) Guarded() bool { return o.Canary > 0 || o.Rate > 0 || o.StopOnFailure }

// Describe says what o does, as a run's selection records it ("" for no
// guard).
func (o Options) Describe() string {
	var parts []string
	if o.Canary > 0 {
		parts = append(parts, fmt.Sprintf("canary %d", o.Canary))
	}
	if o.Rate > 0 {
		parts = append(parts, fmt.Sprintf("rate %v/s", o.Rate))
	}
	if o.StopOnFailure {
		parts = append(parts, "stop on failure")
	}
	if o.Wait > 0 {
		parts = append(parts, "wait "+o.Wait.String())
	}
	return strings.Join(parts, ", ")
}

// Progress is where a run stands.
type Progress struct {
	// Total is how many letters it selected; Replayed how many it
	// replayed; Succeeded and Failed how many of those it saw succeed
	// and fail again; Left how many it has not replayed.
	Total, Replayed, Succeeded, Failed, Left int
	// Phase is "canary", "replaying", "waiting" or "finished".
	Phase string
}

// String is the progress on one line, for a terminal or a page.
func (p Progress) String() string {
	return fmt.Sprintf("%s: %d of %d replayed, %d succeeded, %d failed again, %d left", p.Phase, p.Replayed, p.Total, p.Succeeded, p.Failed, p.Left)
}

// Run is one guarded replay.
type Run struct {
	// Letters are the dead letters to replay, in order.
	Letters []Letter
	// Options are its guards.
	Options
	// Replay replays one letter. An error ends the run (RunFailed).
	Replay func(ctx context.Context, l Letter) error
	// Outcome tells where the replay of l stands, with a message that
	// says how.
	Outcome func(ctx context.Context, l Letter) (Outcome, string, error)
	// Runs, when set, records the run as it goes (store.ReplayRuns);
	// Side and Selection describe it there. RunID, when above 0, is the
	// run already recorded (StartRun) that Do goes on with, as a caller
	// does that reports the run's id before it runs it.
	Runs            store.ReplayRuns
	Side, Selection string
	RunID           int64
	// OnReplayed, when set, is called after each replay.
	OnReplayed func(l Letter)
	// OnOutcome, when set, is called with each outcome seen (Succeeded
	// or FailedAgain) and its message.
	OnOutcome func(l Letter, o Outcome, msg string)
	// OnProgress, when set, is called about every ProgressEvery while
	// the run goes on, and once at its end.
	OnProgress func(Progress)
	// ProgressEvery spaces progress reports and records; default 1s.
	ProgressEvery time.Duration
	// Poll spaces the looks at the outcomes; default 200ms.
	Poll time.Duration
	// Now and Sleep are the clock the run spaces its replays, waits and
	// reports by; default the real one. Sleep returns ctx's error when
	// ctx ends first.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
}

// Result is how a run ended.
type Result struct {
	// ID is the run's id in store.ReplayRuns, 0 when not recorded.
	ID int64
	// State is store.RunDone, RunStopped or RunFailed.
	State string
	Progress
	// Note says why it stopped, or how it ended.
	Note string
	// Pending are the replayed letters without an outcome when the run
	// ended.
	Pending []Letter
	// ReplayedAt is when each replay was made, by the run's clock.
	ReplayedAt []time.Time
}

// runner is a Run going on.
type runner struct {
	*Run
	res          Result
	outstanding  []Letter
	lastLook     time.Time
	lastProgress time.Time
	next         time.Time // the earliest time of the next replay (Rate)
}

// Do runs r: the canary, then the rest, at the rate, watching the
// outcomes as the options say, recording the run as it goes. It returns
// the result and, for a run ended by an error (RunFailed), the error.
func (r *Run) Do(ctx context.Context) (Result, error) {
	if err := r.Check(); err != nil {
		return Result{}, err
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.Sleep == nil {
		r.Sleep = sleep
	}
	if r.ProgressEvery <= 0 {
		r.ProgressEvery = time.Second
	}
	if r.Poll <= 0 {
		r.Poll = 200 * time.Millisecond
	}
	x := &runner{Run: r}
	x.res.Total, x.res.Left = len(r.Letters), len(r.Letters)
	x.res.Phase = "replaying"
	x.res.ID = r.RunID
	if r.Runs != nil && r.RunID == 0 {
		id, err := r.Runs.StartRun(ctx, store.ReplayRun{Side: r.Side, Selection: r.Selection, Total: len(r.Letters), Note: "started"})
		if err != nil {
			return Result{}, err
		}
		x.res.ID = id
	}
	x.lastProgress = r.Now()
	state, note, err := x.do(ctx)
	return x.finish(state, note, err)
}

func (x *runner) do(ctx context.Context) (state, note string, err error) {
	rest := x.Letters
	if n := min(x.Canary, len(rest)); n > 0 {
		x.res.Phase = "canary"
		for _, l := range rest[:n] {
			if err := x.replay(ctx, l); err != nil {
				return x.ended(ctx, err)
			}
		}
		rest = rest[n:]
		if err := x.waitAll(ctx); err != nil {
			return x.ended(ctx, err)
		}
		switch {
		case x.res.Failed > 0:
			return store.RunStopped, fmt.Sprintf("stopped: %d of the %d canary replay(s) failed again; %d left unreplayed", x.res.Failed, n, len(rest)), nil
		case len(x.outstanding) > 0:
			return store.RunStopped, fmt.Sprintf("stopped: %d of the %d canary replay(s) had no outcome after %s; %d left unreplayed", len(x.outstanding), n, x.Wait, len(rest)), nil
		}
		x.res.Phase = "replaying"
	}
	for i, l := range rest {
		if err := x.replay(ctx, l); err != nil {
			return x.ended(ctx, err)
		}
		if x.StopOnFailure {
			if err := x.look(ctx, false); err != nil {
				return x.ended(ctx, err)
			}
			if x.res.Failed > 0 && i < len(rest)-1 {
				return store.RunStopped, fmt.Sprintf("stopped: %d replay(s) failed again; %d left unreplayed", x.res.Failed, len(rest)-i-1), nil
			}
		}
	}
	if x.Wait > 0 {
		x.res.Phase = "waiting"
		if err := x.waitAll(ctx); err != nil {
			return x.ended(ctx, err)
		}
	}
	note = fmt.Sprintf("all %d replayed", x.res.Replayed)
	if x.Wait > 0 {
		note += fmt.Sprintf(": %d succeeded, %d failed again", x.res.Succeeded, x.res.Failed)
		if len(x.outstanding) > 0 {
			note += fmt.Sprintf(", %d without an outcome after %s", len(x.outstanding), x.Wait)
		}
	}
	return store.RunDone, note, nil
}

// ended is how a run ends on err: stopped when ctx ended, failed
// otherwise.
func (x *runner) ended(ctx context.Context, err error) (string, string, error) {
	if ctx.Err() != nil {
		return store.RunStopped, fmt.Sprintf("interrupted: %d left unreplayed", x.res.Left), ctx.Err()
	}
	return store.RunFailed, fmt.Sprintf("failed: %v; %d left unreplayed", err, x.res.Left), err
}

// replay replays l once the rate allows.
func (x *runner) replay(ctx context.Context, l Letter) error {
	if x.Rate > 0 {
		now := x.Now()
		if x.next.After(now) {
			if err := x.Sleep(ctx, x.next.Sub(now)); err != nil {
				return err
			}
			now = x.Now()
		}
		x.next = now.Add(time.Duration(float64(time.Second) / x.Rate))
	}
	if err := x.Replay(ctx, l); err != nil {
		return err
	}
	x.res.ReplayedAt = append(x.res.ReplayedAt, x.Now())
	x.res.Replayed++
	x.res.Left--
	x.outstanding = append(x.outstanding, l)
	if x.OnReplayed != nil {
		x.OnReplayed(l)
	}
	return x.report(ctx, false)
}

// look reads the outcomes of the outstanding replays, unless it did less
// than Poll ago (or force).
func (x *runner) look(ctx context.Context, force bool) error {
	now := x.Now()
	if !force && now.Sub(x.lastLook) < x.Poll {
		return nil
	}
	x.lastLook = now
	var still []Letter
	for _, l := range x.outstanding {
		o, msg, err := x.Outcome(ctx, l)
		if err != nil {
			return err
		}
		switch o {
		case Pending:
			still = append(still, l)
			continue
		case Succeeded:
			x.res.Succeeded++
		case FailedAgain:
			x.res.Failed++
		}
		if x.OnOutcome != nil {
			x.OnOutcome(l, o, msg)
		}
	}
	x.outstanding = still
	return x.report(ctx, false)
}

// waitAll waits up to Wait for the outcomes of the outstanding replays,
// or until one fails again when the run stops on one.
func (x *runner) waitAll(ctx context.Context) error {
	deadline := x.Now().Add(x.Wait)
	for {
		if err := x.look(ctx, true); err != nil {
			return err
		}
		if len(x.outstanding) == 0 || !x.Now().Before(deadline) {
			return nil
		}
		if err := x.Sleep(ctx, min(x.Poll, deadline.Sub(x.Now()))); err != nil {
			return err
		}
	}
}

// report calls OnProgress and records the progress, at most every
// ProgressEvery unless force.
func (x *runner) report(ctx context.Context, force bool) error {
	now := x.Now()
	if !force && now.Sub(x.lastProgress) < x.ProgressEvery {
		return nil
	}
	x.lastProgress = now
	if x.OnProgress != nil {
		x.OnProgress(x.res.Progress)
	}
	if x.Runs != nil && x.res.ID != 0 && x.res.Phase != "finished" {
		return x.Runs.UpdateRun(ctx, x.res.ID, x.res.Replayed, x.res.Failed, x.res.Progress.String())
	}
	return nil
}

// finish records the run's end and returns its result.
func (x *runner) finish(state, note string, err error) (Result, error) {
	x.res.State, x.res.Note, x.res.Pending = state, note, x.outstanding
	x.res.Phase = "finished"
	if x.OnProgress != nil {
		x.OnProgress(x.res.Progress)
	}
	if x.Runs != nil && x.res.ID != 0 {
		// The run's end is recorded even when its context ended.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if ferr := x.Runs.FinishRun(ctx, x.res.ID, state, x.res.Replayed, x.res.Failed, note); ferr != nil && err == nil {
			err = ferr
		}
	}
	return x.res, err
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
