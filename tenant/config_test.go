package tenant_test

import (
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/store/sqlite"
	"github.com/courier-go/courier/tenant"
)

// ConsumerConfig.Validate names each bad field and its fix, the inbox
// consumer's included.
func TestConsumerConfigValidate(t *testing.T) {
	src, refused := tenant.List(), sqlite.NewDriver(nil).ConsumerStore()
	if err := (tenant.ConsumerConfig{Source: src, Refused: refused}).Validate(); err != nil {
		t.Fatalf("zero fields take their defaults: %v", err)
	}
	for _, c := range []struct {
		cfg  tenant.ConsumerConfig
		want string
	}{
		{tenant.ConsumerConfig{Refused: refused}, "tenant: ConsumerConfig.Source is nil"},
		{tenant.ConsumerConfig{Source: src}, "tenant: ConsumerConfig.Refused is nil"},
		{tenant.ConsumerConfig{Source: src, Refused: refused, MaxOpen: -1}, "tenant: ConsumerConfig.MaxOpen is -1: use 1 or more"},
		{tenant.ConsumerConfig{Source: src, Refused: refused, MaxConns: -1}, "tenant: ConsumerConfig.MaxConns is -1: use 1 or more"},
		{tenant.ConsumerConfig{Source: src, Refused: refused, ConnectTimeout: -time.Second}, "tenant: ConsumerConfig.ConnectTimeout is -1s"},
		{tenant.ConsumerConfig{Source: src, Refused: refused, Refresh: time.Millisecond}, "tenant: ConsumerConfig.Refresh is 1ms: use 1s or more"},
		{tenant.ConsumerConfig{Source: src, Refused: refused, Reread: -time.Second}, "tenant: ConsumerConfig.Reread is -1s"},
		{tenant.ConsumerConfig{Source: src, Refused: refused, ReplayScan: -time.Second}, "tenant: ConsumerConfig.ReplayScan is -1s"},
		{tenant.ConsumerConfig{Source: src, Refused: refused, Inbox: inbox.ConsumerConfig{ExtendEvery: -time.Second}}, "inbox: ConsumerConfig.ExtendEvery is -1s"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate: %v, want %q", err, c.want)
		}
	}
}
