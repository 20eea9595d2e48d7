package nats_test

import (
	"errors"
	"testing"

	natsgo "github.com/nats-io/nats.go"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/cloudevents"
	couriernats "github.com/courier-go/courier/broker/nats"
)

// FromNATS never panics on a message carrying CloudEvents attributes, with
// or without Courier's headers, and refuses with ErrMalformed; what it
// takes from the attributes alone is what they say.
func FuzzFromNATSCloudEvents(f *testing.F) {
	f.Add("1.0", "0192d5f0-7c1e-7a3b-8f00-000000000042", "/shop", "OrderPlaced", "order-42", "2026-11-30T12:00:00Z", "2", []byte(`{}`), false)
	f.Add("1.0", "evt-1", "", "T", "k", "2026-11-30T12:00:00+23:60", "0", []byte(nil), true)
	f.Add("", "", "", "", "", "", "", []byte(nil), true)
	f.Fuzz(func(t *testing.T, spec, id, source, typ, subject, tm, version string, data []byte, courierHeaders bool) {
		h := natsgo.Header{}
		for name, v := range map[string]string{"specversion": spec, "id": id, "source": source, "type": typ, "subject": subject, "time": tm, "courierversion": version} {
			if v != "" {
				h[cloudevents.PrefixNATS+name] = []string{v}
			}
		}
		if courierHeaders {
			h[couriernats.HeaderType] = []string{typ}
		}
		m, err := couriernats.Config{}.FromNATS(&natsgo.Msg{Subject: "courier.orders", Header: h, Data: data})
		if err != nil {
			if !errors.Is(err, courier.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if string(m.Payload) != string(data) || m.Type != typ {
			t.Fatalf("decoded %+v from type %q", m, typ)
		}
	})
}
