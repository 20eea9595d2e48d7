package webhook_test

import (
	"context"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/brokertest"
	"github.com/courier-go/courier/broker/webhook"
)

// maxBody is the receiving Handler's body limit in the conformance suite.
const maxBody = 1 << 20

// features are what webhooks promise, as the package documents them: no
// deduplication on the wire (the inbox dedups), a body over the receiver's
// limit refused with 413, a counted failure (4xx other than 410). The
// Handler is not a Subscriber the suite can drive: a request waits for its
// consumer's verdict, so a Publish returns only once a consumer took the
// message, and redelivery is the sender's next attempt. The suite therefore
// reads what a Handler, acknowledged by a goroutine, received (Stored);
// handler_test.go tests the Handler's deliveries.
var features = brokertest.Features{
	OversizeBytes:    maxBody + 1,
	OversizeRejected: false,
}

func TestConformance(t *testing.T) {
	brokertest.Run(t, brokertest.Harness{
		Features: features,
		New: func(t testing.TB) brokertest.Instance {
			secret := newSecret(t)
			rec := newRecorder(t, secret)
			pub := newPublisher(t, webhook.PublisherConfig{
				Endpoints: map[string]string{"orders": rec.srv.URL},
				Secrets:   []string{secret},
				Timeout:   5 * time.Second,
			})
			return brokertest.Instance{
				Topic:     "orders",
				Publisher: pub,
				Stored:    rec.stored,
				Unreachable: func(t testing.TB) broker.Publisher {
					down := httptest.NewServer(nil)
					down.Close()
					return newPublisher(t, webhook.PublisherConfig{DefaultEndpoint: down.URL, Secrets: []string{secret}, Timeout: time.Second})
				},
			}
		},
	})
}

// recorder is an httptest server running a Handler whose deliveries a
// goroutine decodes, records and acknowledges.
type recorder struct {
	srv *httptest.Server
	h   *webhook.Handler

	mu   sync.Mutex
	msgs []courier.Message
}

func newRecorder(t testing.TB, secrets ...string) *recorder {
	h, err := webhook.NewHandler(webhook.HandlerConfig{VerifierConfig: webhook.VerifierConfig{Secrets: secrets, MaxBodyBytes: maxBody}})
	if err != nil {
		t.Fatalf("handler: %v", err)
	}
	rec := &recorder{srv: httptest.NewServer(h), h: h}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			d, err := h.Next(ctx)
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("Next: %v", err)
				}
				return
			}
			m, err := h.Decode(d.Raw())
			if err != nil {
				t.Errorf("decode: %v", err)
				_ = d.Drop(ctx)
				continue
			}
			rec.mu.Lock()
			rec.msgs = append(rec.msgs, m)
			rec.mu.Unlock()
			if err := d.Ack(ctx); err != nil {
				t.Errorf("ack: %v", err)
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = h.Close()
		rec.srv.Close()
	})
	return rec
}

// stored returns what the Handler received, in order.
func (r *recorder) stored(testing.TB) []courier.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]courier.Message(nil), r.msgs...)
}
