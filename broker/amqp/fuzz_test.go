package amqp_test

import (
	"errors"
	"testing"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/amqp"
	"github.com/courier-go/courier/broker/cloudevents"
)

// Decode never panics on a delivery carrying CloudEvents attributes under
// either of the binding's prefixes, with or without Courier's headers, and
// refuses with ErrMalformed; what it takes from the attributes alone is
// what they say.
func FuzzDecodeCloudEvents(f *testing.F) {
	f.Add(true, "1.0", "0192d5f0-7c1e-7a3b-8f00-000000000042", "/shop", "OrderPlaced", "order-42", "2026-11-30T12:00:00Z", "2", []byte(`{}`), false)
	f.Add(false, "1.0", "evt-1", "", "T", "k", "2026-11-30T12:00:00.1-23:59", "", []byte(nil), true)
	f.Add(true, "", "", "", "", "", "", "", []byte(nil), true)
	f.Fuzz(func(t *testing.T, colon bool, spec, id, source, typ, subject, tm, version string, data []byte, courierHeaders bool) {
		prefix := cloudevents.PrefixAMQPUnderscore
		if colon {
			prefix = cloudevents.PrefixAMQP
		}
		h := map[string][]string{}
		for name, v := range map[string]string{"specversion": spec, "id": id, "source": source, "type": typ, "subject": subject, "time": tm, "courierversion": version} {
			if v != "" {
				h[prefix+name] = []string{v}
			}
		}
		if courierHeaders {
			h[amqp.HeaderVersion] = []string{version}
		}
		m, err := amqp.Config{}.Decode(broker.Raw{Subject: "orders", Headers: h, Data: data})
		if err != nil {
			if !errors.Is(err, courier.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if string(m.Payload) != string(data) || (!courierHeaders && (m.Type != typ || m.Key != subject)) {
			t.Fatalf("decoded %+v from type %q subject %q", m, typ, subject)
		}
	})
}
