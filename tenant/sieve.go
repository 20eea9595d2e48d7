package tenant

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/courier-go/courier/store/dburl"
)

// Rejected is an entry of a tenant list that names no tenant served: its
// name is not valid, it is given twice, its URL is not one package
// store/dburl reads, or (a tenants file's line, a query's row) it is not
// a name and a URL. The other entries are served all the same.
type Rejected struct {
	// Name is the entry's name as given, cut to 100 characters.
	Name string `json:"name"`
	// Reason says what is wrong with the entry, and the fix.
	Reason string `json:"reason"`
}

// String returns the name, quoted, and the reason.
func (r Rejected) String() string { return fmt.Sprintf("%q: %s", r.Name, r.Reason) }

// RejectedError is the error a Source returns beside the tenants it read
// when some of the entries it read are not tenants: those are left out of
// the tenants it returns, and listed here. Callers that read Source
// through a Sieve, as Fleet and Consumer do, serve the tenants returned
// and report the rejected entries.
type RejectedError struct {
	// From says where the entries came from, such as "tenants file
	// /etc/courier/tenants".
	From     string
	Rejected []Rejected
}

func (e *RejectedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d entries rejected", e.From, len(e.Rejected))
	for i, r := range e.Rejected {
		if i == 3 {
			fmt.Fprintf(&b, "; and %d more", len(e.Rejected)-i)
			break
		}
		b.WriteString("; " + r.String())
	}
	return b.String()
}

// maxRejectedName is how much of a rejected entry's name is kept, in
// characters.
const maxRejectedName = 100

// rejected returns the Rejected of an entry named name.
func rejected(name, reason string) Rejected {
	if utf8.RuneCountInString(name) > maxRejectedName {
		name = string([]rune(name)[:maxRejectedName-1]) + "…"
	}
	return Rejected{Name: name, Reason: reason}
}

// Sift splits ts into the tenants that are valid, sorted by name, and the
// entries that are not: a name that is not 1 to 64 letters, digits, '.',
// '_' and '-'; a name given more than once (every entry of it is
// rejected: which URL is the tenant's cannot be told); a URL package
// store/dburl does not read. It is the rule Check applies, entry by
// entry.
func Sift(ts []Tenant) (valid []Tenant, rej []Rejected) {
	times := make(map[string]int, len(ts))
	for _, t := range ts {
		times[t.Name]++
	}
	for _, t := range ts {
		switch {
		case !validName.MatchString(t.Name):
			rej = append(rej, rejected(t.Name, "the name is not valid: use 1 to 64 letters, digits, '.', '_' and '-'"))
		case times[t.Name] > 1:
			rej = append(rej, rejected(t.Name, fmt.Sprintf("the name is given %d times, so no URL is taken for it: give each tenant a name of its own", times[t.Name])))
		default:
			if _, err := dburl.Parse(t.URL, dburl.Options{Flag: "its URL"}); err != nil {
				rej = append(rej, rejected(t.Name, err.Error()))
				continue
			}
			valid = append(valid, t)
		}
	}
	return sorted(valid), rej
}

// sifted returns what a Source made of ts, entries read from: the valid
// tenants, and a *RejectedError listing the others (rejected before, as
// a tenants file's lines that are not a name and a URL, included), or nil.
func sifted(ts []Tenant, before []Rejected, from string) ([]Tenant, error) {
	valid, rej := Sift(ts)
	if rej = append(before, rej...); len(rej) > 0 {
		return valid, &RejectedError{From: from, Rejected: rej}
	}
	return valid, nil
}

// Sieve reads a Source for a program that runs: it serves the valid
// tenants, leaves out the entries that are not (see Sift and
// RejectedError), whatever the Source (a SourceFunc that does not check
// included), logs each rejected entry once, and keeps the rejections of
// its last read. An entry rejected, then fixed or removed, is logged
// again if it comes back rejected. A Sieve is a Source; Fleet and
// Consumer read theirs through one. It is safe for concurrent use.
type Sieve struct {
	src Source
	log *slog.Logger

	mu     sync.Mutex
	last   []Rejected
	logged map[Rejected]bool // the rejections logged, as long as they last
}

// NewSieve returns the sieve of src, logging to log (nil: not logged).
func NewSieve(src Source, log *slog.Logger) *Sieve {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Sieve{src: src, log: log, logged: map[Rejected]bool{}}
}

// Tenants reads the Source and returns its valid tenants, sorted by name.
// An error is the Source's, other than a *RejectedError: then no tenant
// was read, and the rejections of the last read are kept.
func (s *Sieve) Tenants(ctx context.Context) ([]Tenant, error) {
	ts, err := s.src.Tenants(ctx)
	var re *RejectedError
	if errors.As(err, &re) {
		err = nil
	}
	if err != nil {
		return nil, err
	}
	ts, rej := Sift(ts) // a Source of the caller's may not check
	if re != nil {
		rej = append(slices.Clone(re.Rejected), rej...)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := make(map[Rejected]bool, len(rej))
	for _, r := range rej {
		now[r] = true
		if !s.logged[r] {
			s.log.Warn("tenant entry rejected; the other tenants are served", "tenant", r.Name, "reason", r.Reason)
		}
	}
	s.logged, s.last = now, rej
	return ts, nil
}

// Rejected returns the entries the last read that worked rejected.
func (s *Sieve) Rejected() []Rejected {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.last)
}
