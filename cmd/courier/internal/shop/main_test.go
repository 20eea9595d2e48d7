package shop_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/courier-go/courier/internal/testenv"
)

// Every goroutine a service, the shop or a load starts must be gone when
// they stopped.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testenv.M(m), testenv.NATSServerLeaks...)
}
