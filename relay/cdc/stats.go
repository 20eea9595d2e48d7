package cdc

import (
	"strconv"
	"sync"
	"sync/atomic"
)

// metrics are the relay's counters.
type metrics struct {
	published, retried, dead, swept atomic.Int64
	mu                              sync.Mutex
	confirmed                       uint64
	reading, making                 bool
}

func (m *metrics) setConfirmed(lsn uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.confirmed = lsn
}

func (m *metrics) setReading(on, making bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reading, m.making = on, on && making
}

func (m *metrics) snapshot() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := Stats{
		Published: m.published.Load(), Retried: m.retried.Load(), DeadLettered: m.dead.Load(),
		Swept: m.swept.Load(), Reading: m.reading, Making: m.making,
	}
	if m.confirmed > 0 {
		s.Confirmed = lsnString(m.confirmed)
	}
	return s
}

// lsnString writes an LSN as PostgreSQL does.
func lsnString(lsn uint64) string {
	return strconv.FormatUint(lsn>>32, 16) + "/" + strconv.FormatUint(lsn&0xFFFFFFFF, 16)
}
