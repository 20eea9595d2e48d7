package courier_test

import (
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier"
)

func TestBackoffDelay(t *testing.T) {
	b := courier.Backoff{Initial: time.Second, Max: 5 * time.Second}
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 5 * time.Second, 60: 5 * time.Second} {
		if got := b.Delay(n); got != want {
			t.Errorf("Delay(%d) = %s, want %s", n, got, want)
		}
	}
}

func TestBackoffValidate(t *testing.T) {
	for _, c := range []struct {
		b    courier.Backoff
		want string // "" for valid
	}{
		{courier.Backoff{}, ""},
		{courier.Backoff{Initial: time.Second, Max: time.Second, Jitter: 1}, ""},
		{courier.Backoff{Initial: -time.Second}, "x: Config.Backoff is -1s..0s: Initial must be at least 0 and Max at least Initial"},
		{courier.Backoff{Initial: time.Minute, Max: time.Second}, "x: Config.Backoff is 1m0s..1s: Initial must be at least 0 and Max at least Initial"},
		{courier.Backoff{Jitter: 1.5}, "x: Config.Backoff.Jitter is 1.5: use 0 to 1"},
		{courier.Backoff{Jitter: -0.1}, "x: Config.Backoff.Jitter is -0.1: use 0 to 1"},
	} {
		err := c.b.Validate("x: Config.Backoff")
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v, want nil", c.b, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: %v, want %q", c.b, err, c.want)
		}
	}
}

func TestBackoffOr(t *testing.T) {
	def := courier.Backoff{Initial: time.Second, Max: time.Minute, Jitter: 0.2}
	if got := (courier.Backoff{}).Or(def); got != def {
		t.Errorf("zero.Or = %+v, want %+v", got, def)
	}
	set := courier.Backoff{Initial: 2 * time.Second, Jitter: 0.5}
	if got, want := set.Or(def), (courier.Backoff{Initial: 2 * time.Second, Max: time.Minute, Jitter: 0.5}); got != want {
		t.Errorf("Or = %+v, want %+v", got, want)
	}
}
