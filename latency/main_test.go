package latency_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/courier-go/courier/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testenv.M(m))
}
