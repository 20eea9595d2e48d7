package postgres

import (
	"fmt"
	"strconv"
	"strings"
)

// snapshot is a PostgreSQL snapshot (pg_current_snapshot): which
// transactions' effects it sees.
type snapshot struct {
	xmin, xmax uint64
	xip        map[uint64]bool
}

// parseSnapshot reads pg_snapshot's text form, xmin:xmax:xip,….
func parseSnapshot(text string) (*snapshot, error) {
	parts := strings.Split(text, ":")
	if len(parts) != 3 {
		return nil, fmt.Errorf("postgres: a snapshot %q: want xmin:xmax:xip", text)
	}
	s := &snapshot{xip: map[uint64]bool{}}
	var err error
	if s.xmin, err = strconv.ParseUint(parts[0], 10, 64); err != nil {
		return nil, fmt.Errorf("postgres: snapshot %q: %w", text, err)
	}
	if s.xmax, err = strconv.ParseUint(parts[1], 10, 64); err != nil {
		return nil, fmt.Errorf("postgres: snapshot %q: %w", text, err)
	}
	for _, x := range strings.Split(parts[2], ",") {
		if x == "" {
			continue
		}
		v, err := strconv.ParseUint(x, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("postgres: snapshot %q: %w", text, err)
		}
		s.xip[v] = true
	}
	return s, nil
}

// sees reports whether the committed transaction xid (32 bits, as the log
// gives it) was visible in s. The log brings transactions from about the
// snapshot's time, so xid is placed in the epoch nearest to xmax.
func (s *snapshot) sees(xid uint32) bool {
	full := s.xmax&^0xFFFFFFFF | uint64(xid)
	if full > s.xmax+(1<<31) && full >= 1<<32 {
		full -= 1 << 32
	} else if full+(1<<31) < s.xmax {
		full += 1 << 32
	}
	switch {
	case full < s.xmin:
		return true
	case full >= s.xmax:
		return false
	}
	return !s.xip[full]
}
