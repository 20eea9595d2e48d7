package nats

import (
	"fmt"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/courier-go/courier/internal/redact"
)

// What Connect sets (see Connect).
const (
	connectionName      = "courier"
	reconnectWait       = 250 * time.Millisecond
	dialTimeout         = 5 * time.Second
	pingInterval        = 5 * time.Second
	maxPingsOutstanding = 2
)

// Connect dials a NATS server with the options a relay wants: a name, retries
// for ever after the first connection, and no reconnect buffer, so publishes
// fail fast while the server is away (the relay retries them later) instead of
// piling up in memory. More options may be added; later ones win. The first
// connection attempt fails at once when nothing answers at url.
//
// url may list several servers, comma-separated: give a cluster's client
// connection every node's URL, so that the client fails over to another
// when its server dies. A server that stops answering without closing the
// connection (stalled, or cut off by a partition) is noticed by the client's
// pings: Connect pings every 5 seconds and gives up on the server after two
// unanswered pings (nats.go's default waits 2 minutes between pings), so the
// relay moves to a live node within 10–15 seconds.
func Connect(url string, opts ...natsgo.Option) (*natsgo.Conn, error) {
	base := []natsgo.Option{
		natsgo.Name(connectionName),
		natsgo.MaxReconnects(-1),
		natsgo.ReconnectWait(reconnectWait),
		natsgo.ReconnectBufSize(-1),
		natsgo.Timeout(dialTimeout),
		natsgo.PingInterval(pingInterval),
		natsgo.MaxPingsOutstanding(maxPingsOutstanding),
	}
	nc, err := natsgo.Connect(url, append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("nats: connect to %s: %w", redact.URL(url), err)
	}
	return nc, nil
}
