package dispatch

import (
	"log/slog"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/relay/settings"
)

// fields are a configuration's shared fields, as a relay's Config holds them.
type fields struct {
	batch, conc, attempts int
	timeout               time.Duration
	backoff               courier.Backoff
	obs                   settings.Observer
	log                   *slog.Logger
	hold                  []string
}

func (f *fields) settings() Settings {
	return Settings{BatchSize: &f.batch, Concurrency: &f.conc, PublishTimeout: &f.timeout, MaxAttempts: &f.attempts,
		Backoff: &f.backoff, Observer: &f.obs, Logger: &f.log, HoldKeys: &f.hold}
}

// SetDefaults fills the configuration's own fields, leaving those set.
func TestSettingsSetDefaultsInPlace(t *testing.T) {
	f := fields{conc: 3, backoff: courier.Backoff{Max: time.Hour}}
	f.settings().SetDefaults(7 * time.Second)
	want := courier.Backoff{Initial: settings.DefaultBackoffInitial, Max: time.Hour, Jitter: settings.DefaultBackoffJitter}
	if f.batch != settings.DefaultBatchSize || f.conc != 3 || f.timeout != 7*time.Second || f.attempts != settings.DefaultMaxAttempts ||
		f.backoff != want || f.obs == nil || f.log == nil {
		t.Fatalf("after SetDefaults: %+v", f)
	}
	if err := f.settings().Validate("x: Config"); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
}

// Validate names each field out of range with prefix, and the fix.
func TestSettingsValidate(t *testing.T) {
	for _, c := range []struct {
		change func(f *fields)
		want   string
	}{
		{func(f *fields) { f.batch = 20000 }, "x: Config.BatchSize is 20000: use 1 to 10000"},
		{func(f *fields) { f.conc = -1 }, "x: Config.Concurrency is -1: use 1 to 64"},
		{func(f *fields) { f.timeout = -time.Second }, "x: Config.PublishTimeout is -1s: use more than 0"},
		{func(f *fields) { f.attempts = -1 }, "x: Config.MaxAttempts is -1: use 1 or more"},
		{func(f *fields) { f.backoff.Initial = 2 * time.Hour }, "x: Config.Backoff is 2h0m0s..1h0m0s: Initial must be at least 0 and Max at least Initial"},
		{func(f *fields) { f.backoff.Jitter = 2 }, "x: Config.Backoff.Jitter is 2: use 0 to 1"},
		{func(f *fields) { f.hold = []string{"orders", ""} }, `x: Config.HoldKeys[1] is empty: name a topic, or "*" alone for every topic`},
		{func(f *fields) { f.hold = []string{"orders", "*"} }, `x: Config.HoldKeys has "*" among other topics: use "*" alone for every topic, or name the topics`},
		{func(f *fields) { f.hold = []string{"*", "*"} }, `x: Config.HoldKeys has "*" among other topics: use "*" alone for every topic, or name the topics`},
		{func(f *fields) { f.hold = []string{"orders", "payments", "orders"} }, `x: Config.HoldKeys names "orders" twice: name each topic once`},
	} {
		f := fields{backoff: courier.Backoff{Max: time.Hour}}
		f.settings().SetDefaults(time.Second)
		c.change(&f)
		if err := f.settings().Validate("x: Config"); err == nil || err.Error() != c.want {
			t.Errorf("%v, want %q", err, c.want)
		}
	}
}

// HoldKeys may be empty, name topics once each, or be "*" alone.
func TestSettingsValidateHoldKeys(t *testing.T) {
	for _, hold := range [][]string{nil, {}, {"orders"}, {"orders", "payments"}, {"*"}, {"orders.*"}} {
		f := fields{hold: hold}
		f.settings().SetDefaults(time.Second)
		if err := f.settings().Validate("x: Config"); err != nil {
			t.Errorf("HoldKeys %q: %v", hold, err)
		}
	}
}
