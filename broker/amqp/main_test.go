package amqp_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/courier-go/courier/broker/brokertest"
	"github.com/courier-go/courier/internal/testenv"
)

func TestMain(m *testing.M) {
	brokertest.Child(openShared) // an instance of the pause sweep's consumer
	goleak.VerifyTestMain(testenv.M(m))
}
