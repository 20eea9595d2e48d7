package webhook

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The Standard Webhooks specification's own example verifies, by the
// signature it publishes.
func TestStandardWebhooksVector(t *testing.T) {
	const (
		secret  = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		id      = "msg_p5jXN8AQM9LWM0D4loKWxJek"
		ts      = 1614265330
		payload = `{"test": 2432232314}`
		want    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	)
	keys, err := parseSecrets([]string{secret})
	if err != nil {
		t.Fatal(err)
	}
	if got := sign(keys[0], id, ts, []byte(payload)); got != want {
		t.Fatalf("signature %s, want %s", got, want)
	}
	v, err := NewVerifier(VerifierConfig{Secrets: []string{secret}})
	if err != nil {
		t.Fatal(err)
	}
	v.now = func() time.Time { return time.Unix(ts+60, 0) }
	r := httptest.NewRequest("POST", "/", strings.NewReader(payload))
	r.Header.Set(HeaderID, id)
	r.Header.Set(HeaderTimestamp, "1614265330")
	r.Header.Set(HeaderSignature, "v1,bm9wZQ== "+want) // a rotated-out signature first
	if _, err := v.Verify(r); err != nil {
		t.Fatalf("Verify: %v", err)
	}
}
