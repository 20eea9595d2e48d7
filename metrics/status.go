package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/courier-go/courier/store"
)

// StatusReader is what FromStatus needs: store.Operations, which every
// store.Database gives (Database.Operations).
type StatusReader interface {
	Status(ctx context.Context) (store.Status, error)
}

// StatusSource answers the outbox, saga, idempotency-key, replication slot
// and scheduled messages' gauges from one store.Status: the outbox per
// topic, the saga instances by type and state with those past their
// deadline, the keys in flight, PostgreSQL's logical replication slots and
// the scheduled messages that wait. Use it for Config.Outbox,
// Config.Sagas, Config.Keys, Config.Slots and Config.Scheduled at once; one
// refresh of the Collector makes one Status query.
type StatusSource struct {
	r  StatusReader
	mu sync.Mutex
	at time.Time // when last was read
	st store.Status
	er error
}

var (
	_ OutboxSource   = (*StatusSource)(nil)
	_ SagaSource     = (*StatusSource)(nil)
	_ KeySource      = (*StatusSource)(nil)
	_ SlotSource     = (*StatusSource)(nil)
	_ ScheduleSource = (*StatusSource)(nil)
)

// FromStatus returns a StatusSource on r.
func FromStatus(r StatusReader) *StatusSource { return &StatusSource{r: r} }

// shared is how long one Status answers the sources: the three queries of
// one refresh.
const shared = time.Second

func (s *StatusSource) status(ctx context.Context) (store.Status, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.at.IsZero() && time.Since(s.at) < shared {
		return s.st, s.er
	}
	s.st, s.er = s.r.Status(ctx)
	s.at = time.Now()
	return s.st, s.er
}

// OutboxStats implements OutboxSource: one series per topic with pending
// messages or dead letters; with none, one series of zeros with topic "",
// so that the gauges exist.
func (s *StatusSource) OutboxStats(ctx context.Context) ([]TopicStats, error) {
	st, err := s.status(ctx)
	if err != nil {
		return nil, err
	}
	if len(st.Topics) == 0 {
		return []TopicStats{{}}, nil
	}
	out := make([]TopicStats, 0, len(st.Topics))
	for _, t := range st.Topics {
		out = append(out, TopicStats{
			Topic: t.Topic, Pending: t.Pending, Leased: t.Leased, InBackoff: t.InBackoff,
			DeadLetters: t.DeadLetters, OldestPendingAge: t.OldestPendingAge(st.Now),
		})
	}
	return out, nil
}

// SagaStats implements SagaSource. Unfinished instances are counted by
// state; finished ones by phase (completed, compensated, …), as
// store.SagaCount gives them. A type's instances past their deadline are
// reported on its first unfinished state: sum the overdue gauge by type.
func (s *StatusSource) SagaStats(ctx context.Context) ([]SagaStats, error) {
	st, err := s.status(ctx)
	if err != nil {
		return nil, err
	}
	overdue := map[string]int64{}
	for _, o := range st.OverdueSagas {
		overdue[o.Type] += o.Count
	}
	var out []SagaStats
	for _, c := range st.Sagas {
		state := c.State
		if state == "" {
			state = c.Phase
		}
		row := SagaStats{Type: c.Type, State: state, Instances: c.Count}
		if c.State != "" && overdue[c.Type] > 0 {
			row.Overdue, overdue[c.Type] = overdue[c.Type], 0
		}
		out = append(out, row)
	}
	return out, nil
}

// KeysInFlight implements KeySource: one series, scope "", counting the
// records whose request has not completed.
func (s *StatusSource) KeysInFlight(ctx context.Context) ([]KeyStats, error) {
	st, err := s.status(ctx)
	if err != nil {
		return nil, err
	}
	return []KeyStats{{InFlight: st.Keys.InFlight}}, nil
}

// SlotStats implements SlotSource: one series per logical replication slot
// of the database, none on other databases than PostgreSQL.
func (s *StatusSource) SlotStats(ctx context.Context) ([]SlotStats, error) {
	st, err := s.status(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]SlotStats, 0, len(st.Slots))
	for _, sl := range st.Slots {
		row := SlotStats{Slot: sl.Name, Active: sl.Active, LagBytes: sl.LagBytes, RetainedBytes: sl.RetainedBytes}
		if sl.LagSeconds != nil {
			row.Lag, row.LagKnown = time.Duration(*sl.LagSeconds*float64(time.Second)), true
		}
		out = append(out, row)
	}
	return out, nil
}

// ScheduleStats implements ScheduleSource.
func (s *StatusSource) ScheduleStats(ctx context.Context) (ScheduleStats, error) {
	st, err := s.status(ctx)
	if err != nil {
		return ScheduleStats{}, err
	}
	out := ScheduleStats{Waiting: st.Scheduled.Waiting.N, Due: st.Scheduled.Due}
	if !st.Scheduled.NextDue.IsZero() {
		out.NextDue, out.Known = st.Scheduled.NextDue.Sub(st.Now), true
	}
	return out, nil
}
