package sqlite

import (
	"time"

	"github.com/courier-go/courier/store"
)

// nowOf returns clock's time, or this process's when clock is nil.
func nowOf(clock store.Clock) time.Time {
	if clock == nil {
		return time.Now()
	}
	return clock()
}
