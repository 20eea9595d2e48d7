package kafka_test

import (
	"errors"
	"testing"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/cloudevents"
	"github.com/courier-go/courier/broker/kafka"
)

// FromRaw never panics on a record carrying CloudEvents attributes, with
// or without Courier's headers, and refuses with ErrMalformed; what it
// takes from the attributes alone is what they say.
func FuzzFromRawCloudEvents(f *testing.F) {
	f.Add("1.0", "0192d5f0-7c1e-7a3b-8f00-000000000042", "/shop", "OrderPlaced", "order-42", "2026-11-30T12:00:00Z", "2", "", []byte(`{}`), false)
	f.Add("1.0", "evt-1", "", "T", "", "2026-11-30T12:00:00+24:00", "x", "record-key", []byte(nil), true)
	f.Add("", "", "", "", "", "", "", "", []byte(nil), true)
	f.Fuzz(func(t *testing.T, spec, id, source, typ, subject, tm, version, recordKey string, data []byte, courierHeaders bool) {
		h := map[string][]string{}
		for name, v := range map[string]string{"specversion": spec, "id": id, "source": source, "type": typ, "subject": subject, "time": tm, "courierversion": version} {
			if v != "" {
				h[cloudevents.PrefixKafka+name] = []string{v}
			}
		}
		if recordKey != "" {
			h[kafka.HeaderKey] = []string{recordKey}
		}
		if courierHeaders {
			h[kafka.HeaderType] = []string{typ}
		}
		m, err := kafka.Config{}.FromRaw(broker.Raw{Subject: "orders", Headers: h, Data: data})
		if err != nil {
			if !errors.Is(err, courier.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if string(m.Payload) != string(data) || (!courierHeaders && m.Type != typ) {
			t.Fatalf("decoded %+v from type %q", m, typ)
		}
	})
}
