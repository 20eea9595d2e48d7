package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/brokerkind"
	"github.com/courier-go/courier/broker/brokerurl"
	"github.com/courier-go/courier/broker/memory"
	"github.com/courier-go/courier/internal/testenv"
)

// A broker that Courier does not ship, added as every broker is: by the
// registration of its Kind, and nothing else. Its URLs are fake://name;
// each name is an in-memory publisher that the test looks at.
func init() { brokerkind.Register(fakeKind) }

var fakeKind = brokerkind.Kind{
	Name:    "fake",
	System:  "fakemq",
	Schemes: []string{"fake"},
	Form:    "fake://name",
	Parse: func(raw string, opts brokerkind.Options) (any, error) {
		_, name, _ := strings.Cut(raw, "://")
		if name == "" || strings.ContainsAny(name, ":/?#@") {
			return nil, fmt.Errorf("%s %q is not a fake broker URL: use fake://name", opts.FlagName(), brokerkind.Redact(raw))
		}
		return name, nil
	},
	Open: func(_ context.Context, _ string, config any, _ brokerkind.Options) (*brokerkind.Opened, error) {
		pub := fakeBroker(config.(string))
		return &brokerkind.Opened{
			Publisher: pub,
			Reader: func(context.Context, []string) (broker.Reader, func(), error) {
				return pub, nil, nil
			},
		}, nil
	},
	LogFields: func(config any, opts brokerkind.Options) []any {
		return []any{"fake_name", config, "fake_stream", opts.Stream}
	},
}

// fakeBrokers are the fake brokers opened, by name.
var fakeBrokers sync.Map

// fakeBroker returns the publisher of the fake broker called name.
func fakeBroker(name string) *memory.Publisher {
	pub, _ := fakeBrokers.LoadOrStore(name, memory.NewPublisher())
	return pub.(*memory.Publisher)
}

// The registered fake broker is known to brokerurl (Parse, Open, Reader,
// CanReadBack, its log fields and messaging.system) and to tracing.
func TestFakeBrokerThroughBrokerURL(t *testing.T) {
	opts := brokerurl.Options{Flag: "--broker-url", Stream: "S"}
	if !strings.Contains(brokerurl.Forms(), "fake://name") {
		t.Errorf("Forms() = %q, without the fake broker's form", brokerurl.Forms())
	}
	for raw, want := range map[string]string{
		"fake://":            `--broker-url "fake://" is not a fake broker URL: use fake://name`,
		"fake://u:hunter2@x": `--broker-url "fake://u:xxxxx@x" is not a fake broker URL`,
		"nope://x":           "is not a broker URL Courier knows: use amqp://",
	} {
		_, err := brokerurl.Parse(raw, opts)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "fake://name") || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Parse(%q): %v; want an error containing %q and the fake form, without the password", raw, err, want)
		}
	}
	u, err := brokerurl.Parse("FAKE://parsed", opts)
	if err != nil || u.Kind != "fake" || u.Config != "parsed" || u.CanReadBack() != nil {
		t.Fatalf("Parse: %+v, %v (read back: %v)", u, err, u.CanReadBack())
	}

	b, err := brokerurl.Open(context.Background(), "fake://opened", opts)
	testenv.Must(t, err, "open")
	defer b.Close()
	if b.Kind() != "fake" || b.String() != "fake://opened" || b.MessagingSystem() != "fakemq" || brokerkind.SystemOf(b) != "fakemq" {
		t.Errorf("kind %q, String %q, system %q, traced as %q", b.Kind(), b.String(), b.MessagingSystem(), brokerkind.SystemOf(b))
	}
	if got := fmt.Sprint(b.LogFields()); got != "[fake_name opened fake_stream S]" {
		t.Errorf("log fields %s", got)
	}
	msg := courier.NewMessage("orders", "k", "T", []byte("{}"))
	if errs := b.Publish(context.Background(), []courier.Message{msg}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	r, err := b.Reader(context.Background(), nil)
	testenv.Must(t, err, "reader")
	var read []courier.Message
	_, err = r.ReadBack(context.Background(), time.Time{}, time.Now().Add(time.Hour), func(s broker.Stored) error {
		read = append(read, s.Message)
		return nil
	})
	if err != nil || len(read) != 1 || read[0].ID != msg.ID {
		t.Errorf("read back %v, %v", read, err)
	}
}

// courier relay publishes an outbox to the registered fake broker, logs its
// fields and lists its form in --help.
func TestFakeBrokerRelay(t *testing.T) {
	if _, out, _ := runCLI(t, "relay", "--help"); !strings.Contains(out, "fake://name") {
		t.Errorf("relay --help does not list fake://name:\n%s", out)
	}
	url, written := writeOutbox(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs bytes.Buffer
	done := make(chan int)
	go func() {
		done <- runContext(ctx, []string{"relay", "--log-format", "json", "--database-url", url, "--broker-url", "fake://relay"}, &bytes.Buffer{}, &logs)
	}()
	pub := fakeBroker("relay")
	testenv.Eventually(t, 30*time.Second, func() bool { return len(pub.Messages()) >= len(written) },
		"the relay published %d of %d messages", testenv.Lazy(func() any { return len(pub.Messages()) }), len(written))
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("relay exited %d:\n%s", code, logs.String())
	}
	got := pub.Messages()
	if len(got) != len(written) {
		t.Fatalf("published %d messages, want %d", len(got), len(written))
	}
	byKey := map[string][]courier.Message{}
	for _, m := range got {
		byKey[m.Key] = append(byKey[m.Key], m)
	}
	for i, m := range written {
		k := byKey[m.Key]
		if len(k) == 0 || k[0].ID != m.ID {
			t.Fatalf("message %d (key %s) is not next of its key", i, m.Key)
		}
		byKey[m.Key] = k[1:]
	}
	for _, want := range []string{`"msg":"relaying"`, `"broker":"fake://relay"`, `"fake_name":"relay"`, `"fake_stream":"COURIER"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %s:\n%s", want, logs.String())
		}
	}
}
