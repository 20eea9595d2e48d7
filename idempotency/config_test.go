package idempotency_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier/idempotency"
	"github.com/courier-go/courier/store/sqlite"
)

// Config.Validate names each bad field and its fix, as New does.
func TestConfigValidate(t *testing.T) {
	scope := idempotency.OneScopeForAllClients
	if err := (idempotency.Config{Scope: scope}).Validate(); err != nil {
		t.Fatalf("zero fields take their defaults: %v", err)
	}
	keys := sqlite.NewDriver(nil).Idempotency() // never reached: the configurations are refused first
	for _, c := range []struct {
		cfg  idempotency.Config
		want string
	}{
		{idempotency.Config{}, "Config.Scope is nil: set it"},
		{idempotency.Config{Scope: scope, Methods: []string{http.MethodPost, ""}}, "Config.Methods[1] is empty: name an HTTP method"},
		{idempotency.Config{Scope: scope, MaxKeyLength: -1}, "Config.MaxKeyLength is -1: use more than 0, or 0 for 255"},
		{idempotency.Config{Scope: scope, MaxBodyBytes: -1}, "Config.MaxBodyBytes is -1: use more than 0, or 0 for 1048576"},
		{idempotency.Config{Scope: scope, MaxResponseBytes: -1}, "Config.MaxResponseBytes is -1: use more than 0, or 0 for 1048576"},
		{idempotency.Config{Scope: scope, LockTimeout: time.Millisecond}, "Config.LockTimeout is 1ms: use at least 1s, or 0 for 1m0s"},
		{idempotency.Config{Scope: scope, LockTimeout: -time.Second}, "Config.LockTimeout is -1s: use at least 1s"},
		{idempotency.Config{Scope: scope, Retention: time.Second}, "Config.Retention is 1s, shorter than LockTimeout (1m0s): use 1m0s or more, or 0 for 24h0m0s"},
		{idempotency.Config{Scope: scope, Retention: -time.Hour}, "Config.Retention is -1h0m0s, shorter than LockTimeout"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate: %v, want %q", err, c.want)
		}
		if _, err := idempotency.New(keys, c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New: %v, want %q", err, c.want)
		}
	}
}
