// Package tenants proves the relay fleet of package tenant at scale: 220
// tenants (PostgreSQL schemas and SQLite files) on a PostgreSQL server of
// the test's own, some of them unreachable or poisoned while the others
// are measured (isolation_test.go), and relay processes SIGKILLed in a
// loop while they share 200 tenants (chaos_test.go).
package tenants

import (
	"os"
	"testing"

	"github.com/courier-go/courier/internal/testenv"
)

func TestMain(m *testing.M) {
	code := testenv.M(m).Run()
	testenv.RemoveCourierBinary()
	os.Exit(code)
}
