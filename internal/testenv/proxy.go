package testenv

import (
	"testing"

	"github.com/courier-go/courier/internal/tcpproxy"
)

// Proxy forwards TCP connections to a server and makes faults of the
// network between them (see tcpproxy.Proxy).
type Proxy = tcpproxy.Proxy

// StartProxy starts a proxy to target (host:port) on a free port of
// 127.0.0.1; it goes down when the test ends.
func StartProxy(t testing.TB, target string) *Proxy { return tcpproxy.Start(t, target) }
