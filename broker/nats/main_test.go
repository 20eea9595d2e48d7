package nats_test

import (
	"os"
	"testing"

	"github.com/courier-go/courier/broker/brokertest"
	"github.com/courier-go/courier/internal/testenv"
)

func TestMain(m *testing.M) {
	brokertest.Child(openShared) // an instance of the pause sweep's consumer
	os.Exit(testenv.M(m).Run())
}
