package ops

import (
	"cmp"
	"slices"

	"github.com/courier-go/courier/store"
)

// Topics gathers a Status's topics by name while a store counts them; the
// in-memory store uses it as the SQL dialects do.
type Topics map[string]*store.TopicStatus

// Get returns the topic name, adding it when it is new.
func (t Topics) Get(name string) *store.TopicStatus {
	if t[name] == nil {
		t[name] = &store.TopicStatus{Topic: name}
	}
	return t[name]
}

// Fill sets st.Topics to the topics, by name, and st.Outbox's counts,
// oldest pending row and oldest hold to those of all topics together.
func (t Topics) Fill(st *store.Status) {
	for _, ts := range t {
		st.Topics = append(st.Topics, *ts)
		st.Outbox.Pending += ts.Pending
		st.Outbox.Leased += ts.Leased
		st.Outbox.InBackoff += ts.InBackoff
		st.Outbox.DeadLetters += ts.DeadLetters
		st.Outbox.HeldKeys += ts.HeldKeys
		st.Outbox.Held += ts.Held
		if !ts.OldestHold.IsZero() && (st.Outbox.OldestHold.IsZero() || ts.OldestHold.Before(st.Outbox.OldestHold)) {
			st.Outbox.OldestHold = ts.OldestHold
		}
		if !ts.OldestPending.IsZero() && (st.Outbox.OldestPending.IsZero() || ts.OldestPending.Before(st.Outbox.OldestPending)) {
			st.Outbox.OldestPending = ts.OldestPending
		}
	}
	slices.SortFunc(st.Topics, func(a, b store.TopicStatus) int { return cmp.Compare(a.Topic, b.Topic) })
}
