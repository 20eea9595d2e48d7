package saga

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
)

// Phases of an instance.
const (
	Running      = "running"
	Compensating = "compensating"
	Completed    = "completed"
	Cancelled    = "cancelled"
)

// Definition describes a saga type. D is the instance's own data, stored as
// JSON.
type Definition[D any] struct {
	// Type names the saga, e.g. "order".
	Type string
	// Initial is the state of a new instance, e.g. "Placed".
	Initial string
	// Steps run in order.
	Steps []Step[D]
	// CompensatingState is the state while compensating. Default
	// "Compensating".
	CompensatingState string
	// CancelledState is the state once compensated. Default "Cancelled".
	CancelledState string
	// Correlate returns the saga id a reply belongs to. Default: its key.
	Correlate func(courier.Message) string
}

// Step is one step of a saga.
type Step[D any] struct {
	// Name names the step, e.g. "payment".
	Name string
	// Pending is the state while the step's reply is awaited; empty keeps
	// the previous state.
	Pending string
	// Done is the state once the step succeeded.
	Done string
	// Command builds the step's command. It may read and change the data.
	Command func(id string, d *D) (courier.Message, error)
	// Succeeded is the type of the reply that completes the step.
	Succeeded string
	// Failed is the type of the reply that fails the step; empty if it
	// cannot fail by reply.
	Failed string
	// OnReply, if set, sees every accepted reply of the step (success or
	// failure) and may record what it carries in the data.
	OnReply func(d *D, reply courier.Message) error
	// Timeout bounds the wait for a reply; 0 waits for ever.
	Timeout time.Duration
	// Retriable steps (after the pivot) are never compensated: a failure or
	// timeout sends their command again.
	Retriable bool
	// Compensate builds the command that undoes the step; nil if there is
	// nothing to undo. It must be idempotent at the receiver.
	Compensate func(id string, d *D) (courier.Message, error)
	// Compensated is the type of the reply that confirms the compensation.
	Compensated string
	// CompensationTimeout is how long to wait for that confirmation before
	// sending the compensation again. Default: Timeout, or 30s. Each
	// compensation (and each retriable step's command) sent again waits
	// twice as long as the previous send, up to 64 times the timeout.
	CompensationTimeout time.Duration
}

// ErrConflict: another transition updated the instance first. Roll back and
// try again (an inbox consumer does, by redelivery).
var ErrConflict = errors.New("saga: instance changed concurrently; retry")

// Instance is a saga instance.
type Instance[D any] struct {
	ID       string
	State    string
	Phase    string
	Data     D
	Reason   string
	Deadline *time.Time
	Version  int
	// History is filled by Get.
	History []store.SagaEvent
}

// Outcome says what Handle did with a reply.
type Outcome struct {
	// Applied is true when the reply moved the saga.
	Applied bool
	// From and To are the states before and after.
	From, To string
	// Reason says why the reply was ignored.
	Reason string
}

// Config tunes an Orchestrator.
type Config struct {
	// Clock is the time the orchestrator reads: the deadlines it sets,
	// which of them Expire finds passed, and the times of instances and
	// their history. Default: the real clock. A test sets a clock it moves
	// to make a step time out without waiting.
	Clock courier.Clock
	// Logger receives transitions and ignored events. Default: discard.
	Logger *slog.Logger
}

// Orchestrator runs the instances of one Definition on a store, sending
// commands through an outbox writer of the same transaction type.
type Orchestrator[D any, TTx any] struct {
	def Definition[D]
	st  store.Sagas[TTx]
	w   *outbox.Writer[TTx]
	now courier.Clock
	log *slog.Logger
}

// Validate reports whether c is usable: nil, or an error naming the field
// and the fix. Every value of Config's fields is valid today (a nil Clock
// is the real one, a nil Logger discards); New calls Validate all the same,
// so that a field added later is checked in one place.
func (c Config) Validate() error { return nil }

// Validate reports whether New would accept d: nil, or an error naming the
// first field that is wrong and the fix. Zero fields that have defaults
// (CompensatingState, CancelledState, Correlate, a step's
// CompensationTimeout) are fine.
func (d Definition[D]) Validate() error {
	switch {
	case d.Type == "":
		return errors.New("saga: Definition.Type is empty: name the saga, e.g. \"order\"")
	case d.Initial == "":
		return errors.New("saga: Definition.Initial is empty: name the state of a new instance, e.g. \"Placed\"")
	case len(d.Steps) == 0:
		return errors.New("saga: Definition.Steps is empty: a saga needs at least one step")
	}
	for i, s := range d.Steps {
		if err := s.validate(i); err != nil {
			return err
		}
	}
	return nil
}

// validate reports what is wrong with the i-th step.
func (s Step[D]) validate(i int) error {
	switch {
	case s.Name == "" || s.Done == "" || s.Command == nil || s.Succeeded == "":
		return fmt.Errorf("saga: Definition.Steps[%d] (%q) needs Name, Done, Command and Succeeded", i, s.Name)
	case s.Timeout < 0:
		return fmt.Errorf("saga: Definition.Steps[%d] (%s).Timeout is %s: use more than 0, or 0 to wait for ever", i, s.Name, s.Timeout)
	case s.CompensationTimeout < 0:
		return fmt.Errorf("saga: Definition.Steps[%d] (%s).CompensationTimeout is %s: use more than 0, or 0 for Timeout (30s without one)", i, s.Name, s.CompensationTimeout)
	case s.Compensate != nil && s.Compensated == "":
		return fmt.Errorf("saga: Definition.Steps[%d] (%s) has Compensate but no Compensated reply type: name the reply that confirms the compensation", i, s.Name)
	case s.Retriable && s.Compensate != nil:
		return fmt.Errorf("saga: Definition.Steps[%d] (%s) is Retriable and has Compensate: steps after the pivot are never compensated; drop one of them", i, s.Name)
	case s.Timeout > 0 && s.Compensate == nil && !s.Retriable:
		return fmt.Errorf("saga: Definition.Steps[%d] (%s) has a Timeout but neither Compensate nor Retriable: a step that times out may still take effect, so it must be undoable or retried; give the pivot no Timeout", i, s.Name)
	}
	return nil
}

// New checks def and cfg (Definition.Validate, Config.Validate) and
// returns an orchestrator.
func New[D any, TTx any](def Definition[D], st store.Sagas[TTx], w *outbox.Writer[TTx], cfg Config) (*Orchestrator[D, TTx], error) {
	if err := def.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if st == nil || w == nil {
		return nil, errors.New("saga: New needs a store and an outbox writer")
	}
	if def.CompensatingState == "" {
		def.CompensatingState = "Compensating"
	}
	if def.CancelledState == "" {
		def.CancelledState = "Cancelled"
	}
	if def.Correlate == nil {
		def.Correlate = func(m courier.Message) string { return m.Key }
	}
	for i, s := range def.Steps {
		if s.CompensationTimeout == 0 {
			def.Steps[i].CompensationTimeout = s.Timeout
			if s.Timeout == 0 {
				def.Steps[i].CompensationTimeout = 30 * time.Second
			}
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Orchestrator[D, TTx]{def: def, st: st, w: w, now: cfg.Clock, log: cfg.Logger.With("saga", def.Type)}, nil
}

// Definition returns the orchestrator's definition (with defaults filled in).
func (o *Orchestrator[D, TTx]) Definition() Definition[D] { return o.def }

// inst is an instance being transitioned inside one transaction.
type inst[D any] struct {
	rec  store.SagaRecord
	data D
}

// Start creates instance id with data in tx and sends its first command.
// It returns store.ErrSagaExists if id is taken.
func (o *Orchestrator[D, TTx]) Start(ctx context.Context, tx TTx, id string, data D) (*Instance[D], error) {
	now := o.now.Now().UTC()
	in := &inst[D]{rec: store.SagaRecord{Type: o.def.Type, ID: id, State: o.def.Initial, Phase: Running, Version: 1,
		CreatedAt: now, UpdatedAt: now}, data: data}
	if err := o.st.Create(ctx, tx, in.rec); err != nil {
		return nil, err
	}
	if err := o.record(ctx, tx, in, courier.Message{Type: "Start"}, "", o.def.Initial, "applied", ""); err != nil {
		return nil, err
	}
	if err := o.enterStep(ctx, tx, in, 0, nil); err != nil {
		return nil, err
	}
	if err := o.save(ctx, tx, in, 1); err != nil {
		return nil, err
	}
	return o.public(in), nil
}

// Handle applies reply to its instance in tx. An event the instance is not
// waiting for is ignored and recorded; Outcome says which. It returns
// ErrConflict when another transition updated the instance meanwhile.
func (o *Orchestrator[D, TTx]) Handle(ctx context.Context, tx TTx, reply courier.Message) (Outcome, error) {
	id := o.def.Correlate(reply)
	rec, err := o.st.Load(ctx, tx, o.def.Type, id)
	if errors.Is(err, store.ErrNotFound) {
		return Outcome{Reason: "no saga " + id}, nil
	}
	if err != nil {
		return Outcome{}, err
	}
	in, err := o.decode(rec)
	if err != nil {
		return Outcome{}, err
	}
	from, version := rec.State, rec.Version
	applied, reason, err := o.apply(ctx, tx, in, reply)
	if err != nil {
		return Outcome{}, err
	}
	if !applied {
		o.log.Info("event ignored", "saga_id", id, "event", reply.Type, "event_id", reply.ID, "state", from, "reason", reason)
		// Recording needs no version check: history is append-only, and an
		// ignored event changes nothing else.
		return Outcome{From: from, To: from, Reason: reason}, o.record(ctx, tx, in, reply, from, from, "ignored", reason)
	}
	if err := o.save(ctx, tx, in, version); err != nil {
		return Outcome{}, err
	}
	o.log.Info("transition", "saga_id", id, "event", reply.Type, "from", from, "to", in.rec.State)
	return Outcome{Applied: true, From: from, To: in.rec.State}, nil
}

// apply decides what reply does to in and does it.
func (o *Orchestrator[D, TTx]) apply(ctx context.Context, tx TTx, in *inst[D], reply courier.Message) (bool, string, error) {
	r := &in.rec
	switch r.Phase {
	case Completed, Cancelled:
		return false, fmt.Sprintf("%s arrived after the saga ended (%s)", reply.Type, r.State), nil
	case Running:
		s := o.def.Steps[r.Step]
		switch reply.Type {
		case s.Succeeded:
			if err := o.onReply(s, in, reply); err != nil {
				return false, "", err
			}
			if err := o.transition(ctx, tx, in, reply, s.Done); err != nil {
				return false, "", err
			}
			if r.Step+1 == len(o.def.Steps) {
				r.Phase, r.Deadline = Completed, nil
				return true, "", nil
			}
			return true, "", o.enterStep(ctx, tx, in, r.Step+1, &reply)
		case s.Failed:
			if s.Failed == "" {
				break
			}
			if err := o.onReply(s, in, reply); err != nil {
				return false, "", err
			}
			reason := failureReason(s, reply)
			if s.Retriable {
				return true, "", o.resend(ctx, tx, in, reply, reason)
			}
			// The step failed: it took no effect. Undo the ones before it.
			return true, "", o.compensate(ctx, tx, in, reply, reason, r.Step-1)
		}
	case Compensating:
		s := o.def.Steps[r.Step]
		if reply.Type == s.Compensated {
			if err := o.onReply(s, in, reply); err != nil {
				return false, "", err
			}
			return true, "", o.nextCompensation(ctx, tx, in, reply)
		}
	}
	return false, o.explain(in, reply), nil
}

// explain says why reply is not what in waits for.
func (o *Orchestrator[D, TTx]) explain(in *inst[D], reply courier.Message) string {
	r := &in.rec
	for i, s := range o.def.Steps {
		switch reply.Type {
		case s.Succeeded, s.Failed:
			switch {
			case r.Phase == Compensating || (r.Phase == Running && i == r.Step):
				return fmt.Sprintf("%s of step %s is late: the step timed out or the saga is compensating (%s)", reply.Type, s.Name, r.State)
			case i < r.Step:
				return fmt.Sprintf("%s is a duplicate: step %s is done (%s)", reply.Type, s.Name, r.State)
			default:
				return fmt.Sprintf("%s is out of order: step %s has not started (%s)", reply.Type, s.Name, r.State)
			}
		case s.Compensated:
			if r.Phase == Compensating && slices.Contains(r.Pending, i) {
				return fmt.Sprintf("%s is out of order: %s is compensated after step %s", reply.Type, s.Name, o.def.Steps[r.Step].Name)
			}
			return fmt.Sprintf("%s is a duplicate or unexpected: step %s is not being compensated (%s)", reply.Type, s.Name, r.State)
		}
	}
	return fmt.Sprintf("%s is not a reply this saga knows", reply.Type)
}

func (o *Orchestrator[D, TTx]) onReply(s Step[D], in *inst[D], reply courier.Message) error {
	if s.OnReply == nil {
		return nil
	}
	if err := s.OnReply(&in.data, reply); err != nil {
		return fmt.Errorf("saga: %s step %s: OnReply: %w", o.def.Type, s.Name, err)
	}
	return nil
}

// HeaderReason carries a failure reply's reason, e.g. "card declined".
const HeaderReason = "Saga-Reason"

func failureReason[D any](s Step[D], reply courier.Message) string {
	if r := reply.Headers[HeaderReason]; r != "" {
		return s.Name + ": " + r
	}
	return s.Name + ": " + reply.Type
}

// enterStep sends step i's command and waits for its reply.
func (o *Orchestrator[D, TTx]) enterStep(ctx context.Context, tx TTx, in *inst[D], i int, cause *courier.Message) error {
	r := &in.rec
	s := o.def.Steps[i]
	r.Step, r.Attempts = i, 0
	if err := o.send(ctx, tx, in, s.Command, cause); err != nil {
		return err
	}
	r.Deadline = o.deadline(s.Timeout)
	if s.Pending != "" {
		ev := courier.Message{Type: "Send " + s.Name}
		if cause != nil {
			ev = *cause
		}
		return o.transition(ctx, tx, in, ev, s.Pending)
	}
	return nil
}

// resend sends the awaited step's command again (retriable steps).
func (o *Orchestrator[D, TTx]) resend(ctx context.Context, tx TTx, in *inst[D], ev courier.Message, reason string) error {
	s := o.def.Steps[in.rec.Step]
	if err := o.send(ctx, tx, in, s.Command, &ev); err != nil {
		return err
	}
	in.rec.Deadline = o.deadline(resendWait(s.Timeout, in.rec.Attempts))
	return o.record(ctx, tx, in, ev, in.rec.State, in.rec.State, "applied", "retried: "+reason)
}

// compensate starts compensating steps last..0 that have a compensation.
func (o *Orchestrator[D, TTx]) compensate(ctx context.Context, tx TTx, in *inst[D], ev courier.Message, reason string, last int) error {
	r := &in.rec
	r.Reason, r.Pending = reason, nil
	for i := last; i >= 0; i-- {
		if o.def.Steps[i].Compensate != nil {
			r.Pending = append(r.Pending, i)
		}
	}
	if len(r.Pending) == 0 {
		r.Phase, r.Deadline = Cancelled, nil
		return o.transition(ctx, tx, in, ev, o.def.CancelledState)
	}
	r.Phase = Compensating
	if err := o.transition(ctx, tx, in, ev, o.def.CompensatingState); err != nil {
		return err
	}
	return o.startCompensation(ctx, tx, in, &ev)
}

// startCompensation sends the compensation of the next pending step.
func (o *Orchestrator[D, TTx]) startCompensation(ctx context.Context, tx TTx, in *inst[D], cause *courier.Message) error {
	r := &in.rec
	r.Step, r.Pending, r.Attempts = r.Pending[0], r.Pending[1:], 0
	s := o.def.Steps[r.Step]
	if err := o.send(ctx, tx, in, s.Compensate, cause); err != nil {
		return err
	}
	r.Deadline = o.deadline(s.CompensationTimeout)
	return nil
}

// nextCompensation moves past a confirmed compensation.
func (o *Orchestrator[D, TTx]) nextCompensation(ctx context.Context, tx TTx, in *inst[D], ev courier.Message) error {
	r := &in.rec
	if err := o.record(ctx, tx, in, ev, r.State, r.State, "applied", o.def.Steps[r.Step].Name+" compensated"); err != nil {
		return err
	}
	if len(r.Pending) == 0 {
		r.Phase, r.Deadline = Cancelled, nil
		return o.transition(ctx, tx, in, ev, o.def.CancelledState)
	}
	return o.startCompensation(ctx, tx, in, &ev)
}

// send writes a command to the outbox, caused by cause.
func (o *Orchestrator[D, TTx]) send(ctx context.Context, tx TTx, in *inst[D], build func(string, *D) (courier.Message, error), cause *courier.Message) error {
	msg, err := build(in.rec.ID, &in.data)
	if err != nil {
		return fmt.Errorf("saga: %s %s: build command: %w", o.def.Type, in.rec.ID, err)
	}
	if cause != nil && cause.ID != [16]byte{} {
		courier.CausedBy(*cause)(&msg)
	}
	msg.SetHeader(courier.HeaderCorrelationID, in.rec.ID)
	in.rec.Attempts++
	return o.w.Write(ctx, tx, msg)
}

func (o *Orchestrator[D, TTx]) deadline(d time.Duration) *time.Time {
	if d <= 0 {
		return nil
	}
	t := o.now.Now().UTC().Add(d)
	return &t
}

// transition moves in to state to and records it.
func (o *Orchestrator[D, TTx]) transition(ctx context.Context, tx TTx, in *inst[D], ev courier.Message, to string) error {
	from := in.rec.State
	in.rec.State = to
	return o.record(ctx, tx, in, ev, from, to, "applied", in.rec.Reason)
}

func (o *Orchestrator[D, TTx]) record(ctx context.Context, tx TTx, in *inst[D], ev courier.Message, from, to, outcome, reason string) error {
	e := store.SagaEvent{Type: o.def.Type, SagaID: in.rec.ID, At: o.now.Now().UTC(), EventType: ev.Type,
		From: from, To: to, Outcome: outcome, Reason: reason}
	if ev.ID != [16]byte{} {
		e.EventID = ev.ID.String()
	}
	return o.st.Record(ctx, tx, e)
}

// save writes in back if nobody else did since version expect.
func (o *Orchestrator[D, TTx]) save(ctx context.Context, tx TTx, in *inst[D], expect int) error {
	data, err := json.Marshal(in.data)
	if err != nil {
		return fmt.Errorf("saga: %s %s: encode data: %w", o.def.Type, in.rec.ID, err)
	}
	in.rec.Data = data
	in.rec.Version = expect + 1
	in.rec.UpdatedAt = o.now.Now().UTC()
	ok, err := o.st.Update(ctx, tx, in.rec, expect)
	if err != nil {
		return err
	}
	if !ok {
		return ErrConflict
	}
	return nil
}

func (o *Orchestrator[D, TTx]) decode(rec store.SagaRecord) (*inst[D], error) {
	in := &inst[D]{rec: rec}
	if len(rec.Data) > 0 {
		if err := json.Unmarshal(rec.Data, &in.data); err != nil {
			return nil, fmt.Errorf("saga: %s %s: decode data: %w", o.def.Type, rec.ID, err)
		}
	}
	if rec.Step < 0 || rec.Step >= len(o.def.Steps) {
		return nil, fmt.Errorf("saga: %s %s: step %d does not exist in this definition", o.def.Type, rec.ID, rec.Step)
	}
	return in, nil
}

func (o *Orchestrator[D, TTx]) public(in *inst[D]) *Instance[D] {
	r := in.rec
	return &Instance[D]{ID: r.ID, State: r.State, Phase: r.Phase, Data: in.data, Reason: r.Reason, Deadline: r.Deadline, Version: r.Version}
}
