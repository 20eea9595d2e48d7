package main

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/audit"
	"github.com/courier-go/courier/broker/kafka"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store/postgres"
)

// courier audit --watch over a stream that `courier relay
// --keep-published` filled judges all 100 messages and says so on
// /metrics and /readyz; the stream then gains a phantom whose key would drive
// a terminal, and the watch counts it.
// courier status shows the watch with what to do, escaped, in tables
// and JSON, and --fail-if-audit-finding fails; once the watch is stopped
// (SIGTERM: a clean exit), --fail-if-audit-stopped fails too.
func TestAuditWatchNATS(t *testing.T) {
	natsURL := testenv.NATSOrEmbedded(t)
	stream, prefix := strings.ToUpper(testenv.Name("WATCH_")), testenv.Name("w")+"."
	nc := testenv.Connect(t, natsURL)
	js, err := jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
	url, _ := writeOutbox(t)
	runRelay(t, url, natsURL, nil, "--stream", stream, "--subject-prefix", prefix, "--keep-published")

	w := startServed(t, nil, "audit", "--database-url", url, "--broker-url", natsURL, "--stream", stream, "--subject-prefix", prefix,
		"--watch", "--interval", "200ms", "--slack", "100ms", "--remember", "1m")
	name := "nats:" + stream
	metric := func(series string) float64 {
		_, body := w.get(t, "/metrics")
		m := regexp.MustCompile(regexp.QuoteMeta(series+`{watch="`+name+`"} `) + `(\S+)`).FindStringSubmatch(body)
		if m == nil {
			return -1
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	testenv.Eventually(t, 30*time.Second, func() bool { return metric("courier_audit_judged_messages_total") == 100 },
		"the watch never judged the 100 messages:\n%s", testenv.Lazy(func() any { _, b := w.get(t, "/metrics"); return b + w.Logs() }))
	code, body := w.get(t, "/readyz")
	if code != http.StatusOK || !strings.Contains(body, `"audit": "audit `+name+`: judged to`) {
		t.Fatalf("/readyz: %d\n%s", code, body)
	}

	ctx := context.Background()
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: couriernats.Config{SubjectPrefix: prefix}})
	testenv.Must(t, err, "publisher")
	phantom := courier.NewMessage("orders", "k\x1b[31mred", "OrderPlaced", nil)
	testenv.Must(t, pub.Publish(ctx, []courier.Message{phantom})[0], "publish the phantom")
	testenv.Eventually(t, 30*time.Second, func() bool { return metric("courier_audit_phantom_messages_total") == 1 },
		"the watch never found the phantom:\n%s", testenv.Lazy(func() any { _, b := w.get(t, "/metrics"); return b + w.Logs() }))

	code, out, errOut := runCLI(t, "status", "--database-url", url)
	if code != 0 {
		t.Fatalf("status: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"CONTINUOUS AUDITS", name, "FINDINGS", audit.Advice(audit.KindPhantom), phantom.ID.String(), `k\x1b[31mred`} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("status holds a raw escape character:\n%q", out)
	}
	if code, _, errOut := runCLI(t, "status", "--database-url", url, "--fail-if-audit-finding"); code != 1 ||
		!strings.Contains(errOut, "continuous audit "+name+" found 0 lost, 1 phantoms, 0 order breaks") {
		t.Errorf("status --fail-if-audit-finding: exit %d, %s", code, errOut)
	}
	_, st, _ := statusJSONOf(t, "--database-url", url)
	if len(st.Watches) != 1 || st.Watches[0].Name != name || st.Watches[0].Phantoms != 1 || st.Watches[0].Lost != 0 ||
		!st.Watches[0].Alarms || st.Watches[0].Stopped || st.Watches[0].Passes < 2 || st.Watches[0].JudgedS <= 0 {
		t.Errorf("status --json: %+v", st.Watches)
	}
	if code, _, errOut := runCLI(t, "status", "--database-url", url, "--fail-if-audit-stopped"); code != 0 {
		t.Errorf("status --fail-if-audit-stopped while the watch runs: exit %d, %s", code, errOut)
	}

	w.stop(t)
	if !strings.Contains(w.Logs(), "continuous audit stopped") {
		t.Errorf("no clean stop in the logs:\n%s", w.Logs())
	}
	time.Sleep(3*200*time.Millisecond + 100*time.Millisecond)
	code, out, errOut = runCLI(t, "status", "--database-url", url, "--fail-if-audit-stopped")
	if code != 1 || !strings.Contains(errOut, "continuous audit "+name+" saved nothing for") || !strings.Contains(out, "STOPPED") {
		t.Errorf("status --fail-if-audit-stopped after the watch stopped: exit %d\n%s\n%s", code, out, errOut)
	}
}

// courier audit --watch on Kafka topics (--topic): named after them, it
// judges what the relay published, then finds a copy published again
// (a duplicate, no alarm: --fail-if-audit-finding passes).
func TestAuditWatchKafka(t *testing.T) {
	raw, cfg := kafkaOrders(t, 2)
	url, written := writeOutbox(t)
	runRelay(t, url, raw, nil, "--keep-published")
	w := startServed(t, nil, "audit", "--database-url", url, "--broker-url", raw, "--topic", "orders",
		"--watch", "--interval", "200ms", "--slack", "100ms", "--remember", "1m")
	series := func(name string) string { return name + `{watch="kafka:orders"} ` }
	metrics := func() string { _, b := w.get(t, "/metrics"); return b }
	testenv.Eventually(t, 30*time.Second, func() bool { return strings.Contains(metrics(), series("courier_audit_judged_messages_total")+"100") },
		"the watch never judged the 100 messages:\n%s", testenv.Lazy(func() any { return metrics() + w.Logs() }))

	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Config: cfg})
	testenv.Must(t, err, "publisher")
	defer pub.Close()
	testenv.Must(t, pub.Publish(context.Background(), []courier.Message{written[0]})[0], "publish a copy again")
	testenv.Eventually(t, 30*time.Second, func() bool { return strings.Contains(metrics(), series("courier_audit_duplicate_messages_total")+"1") },
		"the watch never found the duplicate:\n%s", testenv.Lazy(func() any { return metrics() + w.Logs() }))
	if body := metrics(); !strings.Contains(body, series("courier_audit_lost_messages_total")+"0") || !strings.Contains(body, series("courier_audit_order_breaks_total")+"0") {
		t.Errorf("the watch found more than the duplicate:\n%s", body)
	}
	if code, out, errOut := runCLI(t, "status", "--database-url", url, "--fail-if-audit-finding"); code != 0 ||
		!regexp.MustCompile(`kafka:orders\s+ok\s`).MatchString(out) {
		t.Errorf("status --fail-if-audit-finding with a duplicate only: exit %d\n%s\n%s", code, out, errOut)
	}
}

// courier relay --audit watches what the relay itself publishes, in its
// process: its /readyz has the audit's check, /metrics its series, and
// the watch is saved in the database.
func TestRelayAudit(t *testing.T) {
	s := serveRelay(t, 100, "--keep-published", "--audit", "--audit-interval", "200ms", "--audit-slack", "100ms")
	testenv.Eventually(t, 30*time.Second, func() bool {
		_, body := s.get(t, "/metrics")
		return strings.Contains(body, `courier_audit_judged_messages_total{watch="nats:COURIER"} 100`)
	}, "the relay's audit never judged the 100 messages:\n%s", testenv.Lazy(func() any { _, b := s.get(t, "/metrics"); return b + s.Logs() }))
	code, body := s.get(t, "/readyz")
	if code != http.StatusOK || !strings.Contains(body, `"audit": "audit nats:COURIER: judged to`) || !strings.Contains(body, `0 lost, 0 phantoms, 0 order breaks, 0 duplicates`) {
		t.Fatalf("/readyz: %d\n%s", code, body)
	}
}

// courier relay --mode cdc --audit watches what the CDC relay publishes
// (it records its copies in batches, after the broker stored them: the
// slack covers that): every message judged, none found wanting, on
// /metrics and /readyz next to the slot's check.
func TestRelayCDCAudit(t *testing.T) {
	pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	natsURL := testenv.NATSOrEmbedded(t)
	nc := testenv.Connect(t, natsURL)
	stream := testenv.Name("CDCAUDIT")
	mapping := couriernats.Config{SubjectPrefix: strings.ToLower(stream) + "."}
	testenv.Must(t, couriernats.EnsureStream(context.Background(), nc, mapping, couriernats.StreamConfig{Name: stream}), "stream")
	slot := newSlot(t, pg, false)
	r := serveRelay(t, 0, "--mode", "cdc", "--slot", slot, "--publication", slot, "--database-url", pg.URL,
		"--broker-url", natsURL, "--stream", stream, "--subject-prefix", mapping.SubjectPrefix,
		"--keep-published", "--audit", "--audit-interval", "200ms", "--audit-slack", "1s")
	const n = 40
	writeMessages(t, pg, n)
	name := `{watch="nats:` + stream + `"}`
	var body string
	testenv.Eventually(t, 30*time.Second, func() bool {
		_, body = r.get(t, "/metrics")
		judged, _ := metricValue(body, "courier_audit_judged_messages_total"+name)
		return judged == n
	}, "the CDC relay's audit never judged the %d messages:\n%s\n%s", n, testenv.Lazy(func() any { return body }), testenv.Lazy(func() any { return r.Logs() }))
	for _, series := range []string{"courier_audit_lost_messages_total", "courier_audit_phantom_messages_total", "courier_audit_duplicate_messages_total", "courier_audit_order_breaks_total"} {
		if v, ok := metricValue(body, series+name); !ok || v != 0 {
			t.Errorf("%s%s = %v (%v), want 0", series, name, v, ok)
		}
	}
	code, ready := r.get(t, "/readyz")
	if code != http.StatusOK || !strings.Contains(ready, `"audit": "audit nats:`+stream+`: judged to`) || !strings.Contains(ready, `"cdc": "reading slot `+slot) {
		t.Fatalf("/readyz: %d %s", code, ready)
	}
}

// The continuous audit refuses what it cannot do before it opens
// anything, naming the flags: a broker that keeps nothing, a relay that
// keeps no copies, Kafka without topics, a memory shorter than a pass.
func TestAuditWatchRefuses(t *testing.T) {
	db := "sqlite://" + t.TempDir() + "/none.db"
	t.Setenv("COURIER_WEBHOOK_SECRET", webhookSecret)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"audit", "--watch", "--broker-url", "amqp://guest:guest@127.0.0.1:1/"}, "RabbitMQ queues hand each message to one consumer"},
		{[]string{"audit", "--watch", "--broker-url", "kafka://127.0.0.1:1"}, "name the topics to audit with --topic"},
		{[]string{"audit", "--watch", "--broker-url", "nats://127.0.0.1:1", "--interval", "1m", "--remember", "30s"}, "--remember (30s) is shorter than --interval (1m0s)"},
		{[]string{"audit", "--watch", "--broker-url", "nats://127.0.0.1:1", "--interval", "0s"}, "--interval is 0s"},
		{[]string{"audit", "--watch", "--broker-url", "nats://127.0.0.1:1", "--from", "2026-12-03T17:00:00Z"}, "leave them out with --watch"},
		{[]string{"relay", "--audit", "--broker-url", "nats://127.0.0.1:1"}, "--audit needs --keep-published"},
		{[]string{"relay", "--audit", "--keep-published", "--broker-url", "amqp://guest:guest@127.0.0.1:1/"}, "--audit cannot audit amqp://guest:xxxxx@127.0.0.1:1/"},
		{[]string{"relay", "--audit", "--keep-published", "--broker-url", "https://hooks.example.com/in"}, "--audit cannot audit https://hooks.example.com/in: a webhook endpoint keeps nothing"},
		{[]string{"relay", "--audit", "--keep-published", "--broker-url", "kafka://127.0.0.1:1"}, "name the topics to audit with --audit-topic"},
		{[]string{"relay", "--audit", "--keep-published", "--broker-url", "nats://127.0.0.1:1", "--audit-interval", "1m", "--audit-remember", "30s"}, "--audit-remember (30s) is shorter than --audit-interval (1m0s)"},
	} {
		code, _, errOut := runCLI(t, append(c.args, "--database-url", db)...)
		if code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, %q; want 1 and %q", c.args, code, errOut, c.want)
		}
	}
}
