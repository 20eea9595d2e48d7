// Package watch proves the continuous audit (audit.Watcher) against real
// brokers and databases: a relay publishes under load while the test
// loses, invents, doubles and reorders messages, and the watch must name
// each within two passes and find nothing else.
package watch

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/courier-go/courier/internal/testenv"
)

// Every goroutine the relays, readers and watches start must be gone when
// the tests have cleaned up.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testenv.M(m))
}
