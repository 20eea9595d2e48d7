package columns

import (
	"testing"
	"time"

	"github.com/courier-go/courier"
)

// BenchmarkInsert1000 measures the INSERT of 1,000 messages and its
// arguments, as the database/sql inserters build it.
func BenchmarkInsert1000(b *testing.B) {
	msgs := make([]courier.Message, 1000)
	for i := range msgs {
		msgs[i] = courier.NewMessage("orders", "order-42", "OrderPlaced", []byte(`{"total":42}`), courier.WithHeader("traceparent", "00-x"))
	}
	at := func(t time.Time) any { return t.UnixMicro() }
	b.ReportAllocs()
	for range b.N {
		Insert(msgs, at, ", created_at", ", ?", int64(1))
	}
}
