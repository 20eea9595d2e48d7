package courier_test

import (
	"testing"

	"github.com/courier-go/courier"
)

// BenchmarkValidate checks a typical message: a JSON payload, trace
// context and a correlation id; every Writer.Write does this per message.
func BenchmarkValidate(b *testing.B) {
	m := courier.NewMessage("orders", "order-42", "OrderPlaced", []byte(`{"order":"order-42","total":1999}`),
		courier.WithContentType(courier.ContentTypeJSON),
		courier.WithHeader(courier.HeaderTraceParent, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
		courier.WithCorrelationID("checkout-42"))
	b.ReportAllocs()
	for b.Loop() {
		if err := m.Validate(courier.Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}
