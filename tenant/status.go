package tenant

import (
	"slices"
	"strings"
	"time"

	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store/dburl"
)

// Status is a snapshot of a Fleet, for health endpoints and the
// dashboard. It encodes to JSON as it is.
type Status struct {
	// Owner names this process.
	Owner string `json:"owner"`
	// Members are the processes sharing the tenants, as the last
	// heartbeat found them; empty without Config.Members.
	Members []string `json:"members,omitempty"`
	// MembersError is the last heartbeat's error; empty once one works.
	MembersError string `json:"members_error,omitempty"`
	// Tenants counts the tenants Source gave, served here or not.
	Tenants int `json:"tenants"`
	// SourceError is the last error of Source; empty once it answers.
	SourceError string `json:"source_error,omitempty"`
	// Rejected are the entries of Source's last answer that are not
	// valid tenants, left out (see Sift).
	Rejected []Rejected `json:"rejected,omitempty"`
	// Open counts the tenants whose database is open now (at most
	// Config.MaxOpen).
	Open int `json:"open"`
	// Served are the tenants this process serves, by name.
	Served []TenantStatus `json:"served"`
}

// TenantStatus is one tenant served by this process.
type TenantStatus struct {
	// Name is the tenant's; Where is its database, without a password.
	Name  string `json:"name"`
	Where string `json:"where"`
	// Open is true while its database is open and its relay runs.
	Open bool `json:"open"`
	// Sessions counts the times its database was opened.
	Sessions int `json:"sessions"`
	// Error is why its database failed: its claims fail while it is
	// open, or it could not be opened, or its claims were failing when its
	// turn ended; empty once it works. FailingSince is when the failures
	// in a row began.
	Error        string    `json:"error,omitempty"`
	FailingSince time.Time `json:"failing_since,omitzero"`
	// Metrics are its relays' totals since this process started.
	Metrics relay.Metrics `json:"metrics"`
	// Relay is the state of its relay while it is open.
	Relay *relay.State `json:"relay,omitempty"`
}

// Status returns the fleet's state.
func (f *Fleet) Status() Status {
	f.mu.Lock()
	st := Status{Owner: f.Owner(), Members: slices.Clone(f.members), MembersError: f.membersErr, Tenants: len(f.tenants),
		SourceError: f.sourceErr, Rejected: f.src.Rejected(), Open: f.slots.inUse()}
	served := make([]*server, 0, len(f.served))
	for _, s := range f.served {
		served = append(served, s)
	}
	f.mu.Unlock()
	for _, s := range served {
		st.Served = append(st.Served, s.status())
	}
	slices.SortFunc(st.Served, func(a, b TenantStatus) int { return strings.Compare(a.Name, b.Name) })
	return st
}

func (s *server) status() TenantStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := TenantStatus{Name: s.t.Name, Where: dburl.Redact(s.t.URL), Sessions: s.sessions, Error: s.err,
		FailingSince: s.failing, Metrics: s.totals}
	if s.relay != nil {
		rs := s.relay.State()
		ts.Open, ts.Relay = true, &rs
		if rs.ClaimFailures > 0 { // its database fails while open
			ts.Error, ts.FailingSince = rs.ClaimError, rs.ClaimFailingSince
		}
		addMetrics(&ts.Metrics, rs.Metrics)
	}
	return ts
}

// Failing counts the tenants served whose database failed at their last
// try.
func (s Status) Failing() int {
	n := 0
	for _, t := range s.Served {
		if t.Error != "" {
			n++
		}
	}
	return n
}
