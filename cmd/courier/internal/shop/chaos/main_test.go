// Package chaos runs the reference shop's four services and a NATS server,
// each a process of its own, through kills, pauses and cut database
// sessions while orders are placed, then audits the shop's databases
// (TestShopUnderProcessKills).
//
//	go test ./cmd/courier/internal/shop/chaos          # 250 orders, 25 s of faults, what CI runs
//	go test ./cmd/courier/internal/shop/chaos -long    # 5,000 orders, 4 minutes of faults
//
// It needs PostgreSQL (COURIER_TEST_POSTGRES_URL); NATS runs embedded in a
// child process it can kill.
package chaos

import (
	"flag"
	"log/slog"
	"os"
	"testing"

	"github.com/courier-go/courier/internal/testenv"
)

func TestMain(m *testing.M) {
	runRole()
	flag.Parse()
	os.Exit(testenv.M(m).Run())
}

// The test binary plays every process of the run: COURIER_CHAOS_ROLE says
// which (nats or shop). Settings come in the environment.
const (
	envRole     = "COURIER_CHAOS_ROLE"
	envPG       = "COURIER_CHAOS_PG"     // role shop: the service's database
	envNATS     = "COURIER_CHAOS_NATS"   // client URL
	envDir      = "COURIER_CHAOS_DIR"    // NATS store (role nats)
	envPort     = "COURIER_CHAOS_PORT"   // NATS port (role nats)
	envPrefix   = "COURIER_CHAOS_PREFIX" // subject prefix
	envStream   = "COURIER_CHAOS_STREAM"
	envLogLevel = "COURIER_CHAOS_LOG_LEVEL" // debug to see everything
)

// runRole runs the process's role (testenv.RunRole) and exits; it returns
// when there is none. A role logs warnings and errors: its log is kept in a
// file, shown when the test fails.
func runRole() {
	testenv.RunRole(envRole, envLogLevel, func(string) slog.Level { return slog.LevelWarn }, map[string]testenv.Role{
		"nats": testenv.NATSRole(envDir, envPort),
		"shop": runShopService,
	})
}
