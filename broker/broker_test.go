package broker_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/courier-go/courier/broker"
)

// Permanent holds for an error that wraps ErrRejected and not
// ErrUnavailable, however deep, and for nothing else.
func TestPermanent(t *testing.T) {
	refused := errors.New("message too large")
	for name, tc := range map[string]struct {
		err  error
		want bool
	}{
		"nil":                      {nil, false},
		"plain":                    {refused, false},
		"rejected":                 {broker.Rejected(refused), true},
		"rejected, wrapped":        {fmt.Errorf("subject x: %w", broker.Rejected(refused)), true},
		"unavailable":              {broker.Unavailable(refused), false},
		"rejected and unavailable": {broker.Unavailable(broker.Rejected(refused)), false},
		"unavailable and rejected": {broker.Rejected(broker.Unavailable(refused)), false},
		"sentinel":                 {broker.ErrRejected, true},
		"joined with an outage":    {errors.Join(broker.ErrRejected, broker.ErrUnavailable), false},
	} {
		if got := broker.Permanent(tc.err); got != tc.want {
			t.Errorf("%s: Permanent(%v) = %v, want %v", name, tc.err, got, tc.want)
		}
	}
}

// Unavailable and Rejected mark an error once, keep its text behind their
// prefix and its chain, and leave nil alone.
func TestMarks(t *testing.T) {
	cause := errors.New("connection reset")
	u := broker.Unavailable(cause)
	if !errors.Is(u, broker.ErrUnavailable) || !errors.Is(u, cause) || u.Error() != "broker unavailable: connection reset" {
		t.Errorf("Unavailable: %q", u)
	}
	if again := broker.Unavailable(u); again != u {
		t.Errorf("Unavailable marked twice: %q", again)
	}
	r := broker.Rejected(cause)
	if !errors.Is(r, broker.ErrRejected) || !errors.Is(r, cause) || r.Error() != "rejected by the broker for good: connection reset" {
		t.Errorf("Rejected: %q", r)
	}
	if again := broker.Rejected(fmt.Errorf("wrapped: %w", r)); errors.Unwrap(again) != r {
		t.Errorf("Rejected marked twice: %q", again)
	}
	if broker.Unavailable(nil) != nil || broker.Rejected(nil) != nil {
		t.Error("nil marked")
	}
}

// A relay, or a publisher that keeps a key's order, asks Permanent whether
// to give up on a message at once and go on with its key.
func ExamplePermanent() {
	errs := []error{
		nil,
		broker.Rejected(errors.New("payload of 2 MiB over max_payload")),
		broker.Unavailable(errors.New("no answer")),
		errors.New("no stream binds the subject"),
	}
	for i, err := range errs {
		switch {
		case err == nil:
			fmt.Println(i, "published")
		case broker.Permanent(err):
			fmt.Println(i, "dead letter at once; the key goes on")
		case errors.Is(err, broker.ErrUnavailable):
			fmt.Println(i, "outage: retried, not counted")
		default:
			fmt.Println(i, "counted failure: retried until MaxAttempts")
		}
	}
	// Output:
	// 0 published
	// 1 dead letter at once; the key goes on
	// 2 outage: retried, not counted
	// 3 counted failure: retried until MaxAttempts
}
