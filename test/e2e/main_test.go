// Package e2e runs Courier end to end over each SQL dialect: the outbox
// writer, the relay and an embedded NATS server on a real database, for
// what the store conformance suite (store/storetest) cannot see from the
// store layer: writers' wake-ups reaching an idle relay, relays draining an
// outbox through a broker in per-key order, and writers serialised per
// aggregate published in write order. SQLite always runs; PostgreSQL (with
// each of its drivers) and MySQL run when their COURIER_TEST_* variables
// are set.
package e2e

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/courier-go/courier/internal/testenv"
)

// Every goroutine the relays and the brokers start must be gone when the
// tests have cleaned up.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testenv.M(m), testenv.NATSServerLeaks...)
}
