package webhook_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/courier-go/courier/broker/webhook"
)

// An endpoint's URL may carry a token in its path or query (many services
// hand out such URLs); the errors a failed publish records, and which
// courier dlq and the dashboard show, hold it redacted: on a refused
// connection, on a status answer, on a circuit breaker that opened.
func TestErrorsRedactTheEndpointsTokens(t *testing.T) {
	const token = "s3cr3tT0k3nFromTheProvider"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusBadRequest)
	}))
	defer failing.Close()
	for _, endpoint := range []string{
		closed + "/hooks/" + token,
		closed + "/hook?token=" + token,
		failing.URL + "/hooks/" + token,
		failing.URL + "/hook?sig=" + token,
	} {
		p := newPublisher(t, webhook.PublisherConfig{DefaultEndpoint: endpoint, Breaker: webhook.BreakerConfig{Failures: 1}})
		for range 2 { // the second finds the breaker open
			err := publishOne(t, p, msg("k"))
			if err == nil || strings.Contains(err.Error(), token) || strings.Contains(err.Error(), "T0k3n") {
				t.Errorf("publish to %s: %v; want an error without the token", endpoint, err)
			}
		}
	}
}
