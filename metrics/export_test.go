package metrics

import "time"

// SetClock makes c read the time from now, so tests move time forward
// instead of sleeping through MinInterval.
func SetClock(c *Collector, now func() time.Time) { c.now = now }
