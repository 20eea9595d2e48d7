package main

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/audit"
	"github.com/courier-go/courier/broker/kafka"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/internal/testenv"
)

// courier audit over a stream that `courier relay --keep-published`
// filled: everything matches (exit 0); then the stream loses a message and
// gains a phantom whose key would drive a terminal, and the audit names
// both (exit 1), escaped, in text and in JSON.
func TestAuditNATS(t *testing.T) {
	natsURL := testenv.NATSOrEmbedded(t)
	stream, prefix := strings.ToUpper(testenv.Name("AUDIT_")), testenv.Name("a")+"."
	nc := testenv.Connect(t, natsURL)
	js, err := jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
	url, written := writeOutbox(t)
	runRelay(t, url, natsURL, nil, "--stream", stream, "--subject-prefix", prefix, "--keep-published")

	args := []string{"audit", "--database-url", url, "--broker-url", natsURL, "--stream", stream, "--subject-prefix", prefix,
		"--since", "10m", "--until", time.Now().Add(time.Minute).UTC().Format(time.RFC3339Nano), "--slack", "5s"}
	code, out, errOut := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("audit of what the relay published: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{`published\s+100\s`, `stored\s+100\s`, `lost\s+0\s`, `phantoms\s+0\s`, `order breaks\s+0\s`, `duplicates\s+0\s`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	// The stream loses the first message; a message nobody wrote arrives.
	ctx := context.Background()
	s, err := js.Stream(ctx, stream)
	testenv.Must(t, err, "stream")
	first, err := s.GetMsg(ctx, 1)
	testenv.Must(t, err, "first message")
	// The relay publishes each key's messages in order, different keys'
	// in any order: the first in the stream is one of those written.
	lost := first.Header.Get("Nats-Msg-Id")
	if !slices.ContainsFunc(written, func(m courier.Message) bool { return m.ID.String() == lost }) {
		t.Fatalf("the stream's first message is %s, none of those written", lost)
	}
	testenv.Must(t, s.DeleteMsg(ctx, 1), "delete the first message")
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: couriernats.Config{SubjectPrefix: prefix}})
	testenv.Must(t, err, "publisher")
	phantom := courier.NewMessage("orders", "k\x1b[31mred", "OrderPlaced", nil)
	testenv.Must(t, pub.Publish(ctx, []courier.Message{phantom})[0], "publish the phantom")

	code, out, errOut = runCLI(t, args...)
	if code != 1 || !strings.Contains(errOut, "1 lost, 1 phantoms, 0 order breaks") {
		t.Fatalf("audit after a loss and a phantom: exit %d; want 1 naming them\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"Lost (1 of 1)", lost, "Phantoms (1 of 1)", phantom.ID.String(), `k\x1b[31mred`} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("output holds a raw escape character:\n%q", out)
	}

	code, out, errOut = runCLI(t, append(args, "--json")...)
	var rep audit.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 {
		t.Fatalf("audit --json: exit %d, %v\n%s\n%s", code, err, out, errOut)
	}
	if rep.Published != 100 || rep.Stored != 100 || rep.Lost.Count != 1 || rep.Lost.Examples[0].MessageID != lost ||
		rep.Phantoms.Count != 1 || rep.Phantoms.Examples[0].Key != phantom.Key || rep.Phantoms.Examples[0].Log != stream {
		t.Errorf("audit --json: %+v", rep)
	}
}

// courier audit reads Kafka topics named by --topic: a copy published
// again after later messages of its key is a duplicate, which fails the
// audit with --fail-on-duplicates only. Without --topic it says to name
// them.
func TestAuditKafka(t *testing.T) {
	raw, cfg := kafkaOrders(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url, written := writeOutbox(t)
	runRelay(t, url, raw, nil, "--keep-published")

	args := []string{"audit", "--database-url", url, "--broker-url", raw, "--since", "10m",
		"--until", time.Now().Add(time.Minute).UTC().Format(time.RFC3339Nano), "--slack", "5s"}
	if code, _, errOut := runCLI(t, args...); code != 1 || !strings.Contains(errOut, "--topic") {
		t.Fatalf("audit of Kafka without --topic: exit %d; want 1 asking for --topic: %s", code, errOut)
	}
	args = append(args, "--topic", "orders")
	if code, out, errOut := runCLI(t, args...); code != 0 || !regexp.MustCompile(`stored\s+100\s`).MatchString(out) {
		t.Fatalf("audit of what the relay published: exit %d\n%s\n%s", code, out, errOut)
	}

	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Config: cfg})
	testenv.Must(t, err, "publisher")
	defer pub.Close()
	testenv.Must(t, pub.Publish(ctx, []courier.Message{written[0]})[0], "publish a copy again")
	code, out, errOut := runCLI(t, args...)
	if code != 0 || !regexp.MustCompile(`duplicates\s+1\s`).MatchString(out) || !strings.Contains(out, written[0].ID.String()) {
		t.Fatalf("audit with a duplicate: exit %d; want 0 listing it\n%s\n%s", code, out, errOut)
	}
	if code, _, errOut := runCLI(t, append(args, "--fail-on-duplicates")...); code != 1 || !strings.Contains(errOut, "1 duplicates") {
		t.Fatalf("audit --fail-on-duplicates: exit %d; want 1: %s", code, errOut)
	}
}

// RabbitMQ queues and webhook endpoints keep nothing to read back: the
// audit says so before it opens anything; a window that ends before it
// starts is refused.
func TestAuditRefuses(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--broker-url", "amqp://guest:guest@127.0.0.1:1/"}, "RabbitMQ queues hand each message to one consumer"},
		{[]string{"--broker-url", "https://hooks.example.com/in"}, "a webhook endpoint keeps nothing"},
		{[]string{"--broker-url", "nats://127.0.0.1:1", "--from", "2026-12-03T18:00:00Z", "--until", "2026-12-03T17:00:00Z"}, "not before its end"},
		{[]string{"--broker-url", "nats://127.0.0.1:1", "--from", "yesterday"}, "--from \"yesterday\" is not an RFC 3339 time"},
	} {
		code, _, errOut := runCLI(t, append([]string{"audit", "--database-url", "sqlite://" + t.TempDir() + "/none.db"}, c.args...)...)
		if code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("audit %v: exit %d, %q; want 1 and %q", c.args, code, errOut, c.want)
		}
	}
}
