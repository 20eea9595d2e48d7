package relay_test

import (
	"fmt"
	"time"

	"github.com/courier-go/courier/relay"
)

// A health check judges a relay's State with a grace period: a failure
// younger than it is tolerated. A program calls r.State().Check(grace) on
// its running relay r, for instance in a health endpoint that answers 503
// with the error's text; here the snapshot is built by hand.
func ExampleState_Check() {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s := relay.State{
		At: now, Running: true, Started: now.Add(-time.Hour), LastClaim: now.Add(-90 * time.Second),
		ClaimError: "dial tcp 10.0.0.5:5432: connect: connection refused", ClaimFailures: 23, ClaimFailingSince: now.Add(-89 * time.Second),
	}
	fmt.Println(s.Check(2 * time.Minute))
	fmt.Println(s.Check(time.Minute))
	// Output:
	// <nil>
	// relay unhealthy: claims have failed for 1m29s (23 in a row), last: dial tcp 10.0.0.5:5432: connect: connection refused: check that the database is reachable and the schema migrated
}
