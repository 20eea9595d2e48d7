package amqp_test

import (
	"os"
	"testing"

	"github.com/courier-go/courier/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.M(m).Run()) }
