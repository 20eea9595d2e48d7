package inbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/internal/testenv"
)

func TestHandlerErrorsAreRedacted(t *testing.T) {
	onEachDialect(t, testHandlerErrorsAreRedacted, testHandlerErrorsAreRedacted)
}

// A handler's error that quotes a database URL with its password, or an
// API key, is stored (each failure in the parked message's history, and
// the parked message's error) with them hidden, as courier dlq and the
// dashboard then show it: the relay's stored broker errors follow the
// same rule (internal/redact).
func testHandlerErrorsAreRedacted[TTx any](t *testing.T, d dialect[TTx]) {
	e := newEnv(t, d)
	msg := courier.NewMessage("payments", "p-1", "ChargeRequested", []byte("{}"))
	const secret, key = "hunter2hunter2", "sk_live_51Habc"
	h := func(context.Context, TTx, courier.Message) error {
		return errors.New("charge: dial postgres://billing:" + secret + "@db.internal:5432/pay: refused; retry https://api.example/v1/charges?api_key=" + key)
	}
	e.publish(msg)
	c, _ := e.start("billing", h, inbox.ConsumerConfig{MaxDeliveries: 2, Concurrency: 1, Backoff: courier.Backoff{Initial: time.Millisecond, Max: time.Millisecond}})
	testenv.Eventually(t, 15*time.Second, func() bool { return c.Metrics().Parked == 1 }, "not parked: %v", testenv.Lazy(func() any { return c.Metrics() }))
	ps := e.parked("billing")
	if len(ps) != 1 || len(ps[0].History) != 2 {
		t.Fatalf("parked %+v, want one message with 2 failures", ps)
	}
	texts := []string{ps[0].Error}
	for _, a := range ps[0].History {
		texts = append(texts, a.Error)
	}
	for _, s := range texts {
		if strings.Contains(s, secret) || strings.Contains(s, key) || !strings.Contains(s, "postgres://billing:xxxxx@db.internal:5432/pay") ||
			!strings.Contains(s, "api_key=xxxxx") {
			t.Errorf("stored error %q: want the password and the key hidden, the rest kept", s)
		}
	}
}
