package cloudevents_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/cloudevents"
)

func TestAttributesAndDecode(t *testing.T) {
	cfg := &cloudevents.Config{Source: "https://shop.example.com/orders"}
	m := courier.NewMessage("orders", "order-42", "OrderPlaced", []byte("x"), courier.WithVersion(2))
	h := map[string]string{}
	for _, a := range cfg.Attributes(cloudevents.PrefixKafka, &m) {
		if !strings.HasPrefix(a.Name, "ce_") || !cloudevents.Written(cloudevents.PrefixKafka, a.Name) {
			t.Fatalf("attribute %q: not prefixed or not recognised as written", a.Name)
		}
		h[a.Name] = a.Value
	}
	if h["ce_specversion"] != "1.0" || h["ce_id"] != m.ID.String() || h["ce_source"] != cfg.Source || h["ce_type"] != "OrderPlaced" ||
		h["ce_subject"] != "order-42" || h["ce_courierversion"] != "2" {
		t.Fatalf("attributes %v", h)
	}
	get := func(k string) string { return h[k] }
	if !cloudevents.IsEvent(cloudevents.PrefixKafka, get) {
		t.Fatal("IsEvent false")
	}
	back, err := cloudevents.Decode(cloudevents.PrefixKafka, get)
	if err != nil {
		t.Fatal(err)
	}
	if back.ID != m.ID || back.Key != m.Key || back.Type != m.Type || back.Version != 2 || !back.OccurredAt.Equal(m.OccurredAt) {
		t.Fatalf("decoded %+v, want %+v", back, m)
	}

	// An id that is not a UUID gets one derived from source and id, the
	// same each time; no courierversion means version 1.
	h["ce_id"] = "evt-1"
	delete(h, "ce_courierversion")
	a, err := cloudevents.Decode(cloudevents.PrefixKafka, get)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := cloudevents.Decode(cloudevents.PrefixKafka, get)
	if a.ID == uuid.Nil || a.ID != b.ID || a.Version != 1 {
		t.Fatalf("derived id %v and %v, version %d", a.ID, b.ID, a.Version)
	}
	h["ce_source"] = "/elsewhere"
	if c, _ := cloudevents.Decode(cloudevents.PrefixKafka, get); c.ID == a.ID {
		t.Fatal("same derived id for another source")
	}

	for attr, val := range map[string]string{"subject": "", "type": "", "time": "yesterday", "specversion": "0.3", "courierversion": "0"} {
		saved := h["ce_"+attr]
		h["ce_"+attr] = val
		if _, err := cloudevents.Decode(cloudevents.PrefixKafka, get); !errors.Is(err, courier.ErrMalformed) || !strings.Contains(err.Error(), "ce_"+attr) {
			t.Errorf("%s=%q: got %v, want ErrMalformed naming it", attr, val, err)
		}
		h["ce_"+attr] = saved
	}
}

func TestWritten(t *testing.T) {
	for name, want := range map[string]bool{
		"ce-id": true, "Ce-Id": true, "Ce-Datacontenttype": true, "ce-courierversion": true,
		"ce-traceparent": false, "ce-": false, "Courier-Key": false, "cloudEvents:type": false,
	} {
		if got := cloudevents.Written(cloudevents.PrefixHTTP, name); got != want {
			t.Errorf("Written(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestCheck(t *testing.T) {
	if err := (&cloudevents.Config{}).Check("kafka: PublisherConfig.CloudEvents"); err == nil ||
		!strings.HasPrefix(err.Error(), "kafka: PublisherConfig.CloudEvents.Source is empty") {
		t.Fatalf("empty source: %v", err)
	}
	if err := (&cloudevents.Config{Source: "http://[::1"}).Check("x"); err == nil {
		t.Fatal("invalid URI accepted")
	}
	if err := (&cloudevents.Config{Source: "/shop orders"}).Check("x"); err == nil {
		t.Fatal("white space accepted")
	}
	if err := (&cloudevents.Config{Source: "/shop"}).Check("x"); err != nil {
		t.Fatal(err)
	}
}
