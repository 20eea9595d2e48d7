package nats_test

import (
	"strings"
	"testing"
	"time"

	couriernats "github.com/courier-go/courier/broker/nats"
)

// ParseURL takes the publisher's settings out of the query and leaves the
// servers for Connect; a bad value or an unknown parameter is named.
func TestParseURL(t *testing.T) {
	servers, cfg, err := couriernats.ParseURL("nats://a:4222,nats://b:4222?batch_time=6ms&max_batches=8&atomic_batches=off")
	if err != nil || servers != "nats://a:4222,nats://b:4222" || cfg.BatchTime != 6*time.Millisecond || cfg.MaxBatches != 8 || !cfg.NoAtomicBatches {
		t.Fatalf("ParseURL: %q %+v %v", servers, cfg, err)
	}
	if servers, cfg, err := couriernats.ParseURL("nats://a:4222"); err != nil || servers != "nats://a:4222" || cfg != (couriernats.PublisherConfig{}) {
		t.Fatalf("ParseURL without a query: %q %+v %v", servers, cfg, err)
	}
	for raw, want := range map[string]string{
		"nats://a?batch_time=-1ms":      `batch_time="-1ms": want a duration above 0`,
		"nats://a?max_batches=0":        `max_batches="0": want a whole number above 0`,
		"nats://a?atomic_batches=maybe": `atomic_batches="maybe": want on or off`,
		"nats://u:pw@a?token=x":         `unknown parameter "token" (known: batch_time, max_batches, atomic_batches=off)`,
		"nats://a?batch_time=1ms;x":     "query",
	} {
		_, _, err := couriernats.ParseURL(raw)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "pw@") {
			t.Errorf("ParseURL(%q): %v; want an error containing %q, without the password", raw, err, want)
		}
	}
}
