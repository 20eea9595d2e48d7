package failover

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/courier-go/courier/internal/testenv"
)

// Every goroutine the relay, its notifier and the pools start must be gone
// when the tests have cleaned up.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testenv.M(m))
}
