package main

import (
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
)

// courier shop --hold-keys takes a comma-separated list of topics, checked
// before anything starts, and hands it to the service's consumer.
func TestShopHoldKeysFlag(t *testing.T) {
	var c cli
	parser, err := kong.New(&c, kong.Name("courier"), kong.Writers(io.Discard, io.Discard), helpVars())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parser.Parse([]string{"shop", "payment", "--hold-keys", "payments,orders"}); err != nil {
		t.Fatal(err)
	}
	e := &env{log: slog.New(slog.DiscardHandler)}
	cfg, err := c.Shop.Payment.config("payment", e)
	if err != nil || !slices.Equal(cfg.HoldKeys, []string{"payments", "orders"}) {
		t.Fatalf("--hold-keys payments,orders: %q, %v", cfg.HoldKeys, err)
	}
	for _, bad := range [][]string{{"payments", ""}, {"*", "payments"}, {"payments", "payments"}} {
		f := shopFlags{BrokerURL: "nats://127.0.0.1:4222", HoldKeys: bad}
		if _, err := f.config("payment", e); err == nil || !strings.HasPrefix(err.Error(), "--hold-keys") {
			t.Errorf("--hold-keys %q: %v, want an error naming the flag", bad, err)
		}
	}
}
