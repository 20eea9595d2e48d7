package polyglot

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/courier-go/courier/internal/testenv"
)

// Every goroutine the relays, consumers and brokers start must be gone
// when the tests have cleaned up.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testenv.M(m), testenv.NATSServerLeaks...)
}
