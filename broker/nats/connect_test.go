package nats_test

import (
	"net"
	"strings"
	"testing"

	couriernats "github.com/courier-go/courier/broker/nats"
)

// A NATS URL may carry a password or a token (nats://TOKEN@host): Connect's
// error names the server without them.
func TestConnectErrorHidesCredentials(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	for _, url := range []string{"nats://s3cr3tT0k3n@" + addr, "nats://u:s3cr3tT0k3n@" + addr} {
		_, err := couriernats.Connect(url)
		if err == nil || strings.Contains(err.Error(), "s3cr3t") || !strings.Contains(err.Error(), addr) {
			t.Errorf("Connect(%s): %v; want an error naming %s without the credentials", url, err, addr)
		}
	}
}
