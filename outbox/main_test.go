package outbox_test

import (
	"os"
	"testing"

	"github.com/courier-go/courier/internal/testenv"
)

// TestMain ends the run with what was skipped for lack of a service.
func TestMain(m *testing.M) {
	os.Exit(testenv.M(m).Run())
}
