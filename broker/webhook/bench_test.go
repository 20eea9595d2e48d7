package webhook_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/webhook"
)

// BenchmarkPublish sends b.N messages, in calls of 1,000, to a loopback
// endpoint that verifies each signature and answers 204: over 1,000 keys
// (each call a message per key, sent concurrently) and on one key (each
// call a key's run, stop-and-wait), as the relay hands them over.
func BenchmarkPublish(b *testing.B) {
	for _, keys := range []int{1000, 1} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			secret := newSecret(b)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if _, err := webhook.Verify(r, secret); err != nil {
					http.Error(w, err.Error(), http.StatusUnauthorized)
					return
				}
				w.WriteHeader(http.StatusNoContent)
			}))
			b.Cleanup(srv.Close)
			p := newPublisher(b, webhook.PublisherConfig{DefaultEndpoint: srv.URL, Secrets: []string{secret}})
			payload := []byte(`{"order":"o-1","total":1250,"currency":"EUR","lines":[{"sku":"a","n":2}]}`)
			msgs := make([]courier.Message, 1000)
			b.ResetTimer()
			for sent := 0; sent < b.N; sent += len(msgs) {
				n := min(len(msgs), b.N-sent)
				for i := range n {
					msgs[i] = courier.NewMessage("orders", fmt.Sprintf("k%d", (sent+i)%keys), "OrderPlaced", payload, courier.WithContentType(courier.ContentTypeJSON))
				}
				for i, err := range p.Publish(context.Background(), msgs[:n]) {
					if err != nil {
						b.Fatalf("message %d: %v", sent+i, err)
					}
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
		})
	}
}
