package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/cloudevents"
	"github.com/courier-go/courier/broker/webhook"
	"github.com/courier-go/courier/internal/testenv"
)

// verifyJS verifies each case with the Standard Webhooks project's
// JavaScript library (npm standardwebhooks) and prints, per case, whether
// it verified and the JSON it parsed from the body.
const verifyJS = `
const { Webhook } = require("standardwebhooks");
const cases = JSON.parse(require("fs").readFileSync(process.argv[2], "utf8"));
const out = cases.map((c) => {
  try {
    return { name: c.name, ok: true, payload: new Webhook(c.secret).verify(c.body, c.headers) };
  } catch (e) {
    return { name: c.name, ok: false, error: String(e) };
  }
});
process.stdout.write(JSON.stringify(out));
`

// jsCase is one request for the JavaScript verifier.
type jsCase struct {
	Name    string            `json:"name"`
	Secret  string            `json:"secret"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
	valid   bool
	want    map[string]any // members the parsed body must have
}

// The Standard Webhooks project's JavaScript library verifies what the
// publisher sends, envelope, CloudEvent and raw JSON alike, and parses the
// envelope; it refuses the same request with its type changed, or checked
// with another endpoint's secret.
func TestStandardWebhooksJS(t *testing.T) {
	node, dir := testenv.NPMPackage(t, "standardwebhooks@1.1.1")
	secretA, secretB := newSecret(t), newSecret(t)
	c := newCapturer(t)
	sent := func(cfg webhook.PublisherConfig, m courier.Message) captured {
		t.Helper()
		cfg.DefaultEndpoint = c.srv.URL
		if err := publishOne(t, newPublisher(t, cfg), m); err != nil {
			t.Fatal(err)
		}
		return c.last(t)
	}
	jsonMsg := msg("order-42")
	jsonMsg.Payload = []byte(`{"order_id": "order-42", "total": 7}`)
	jsonMsg.SetHeader("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	binMsg := courier.NewMessage("files", "f-1", "FileStored", []byte{0, 1, 0xfe, 0xff})

	var cases []jsCase
	add := func(name, secret string, r captured, valid bool, want map[string]any) {
		h := map[string]string{}
		for _, k := range []string{webhook.HeaderID, webhook.HeaderTimestamp, webhook.HeaderSignature} {
			h[k] = r.header.Get(k)
		}
		cases = append(cases, jsCase{Name: name, Secret: secret, Headers: h, Body: string(r.body), valid: valid, want: want})
	}
	env := sent(webhook.PublisherConfig{Secrets: []string{secretA}}, jsonMsg)
	add("envelope", secretA, env, true, map[string]any{"type": "OrderPlaced", "topic": "orders", "key": "order-42", "version": 1.0,
		"data": map[string]any{"order_id": "order-42", "total": 7.0}})
	add("binary payload", secretA, sent(webhook.PublisherConfig{Secrets: []string{secretA}}, binMsg), true,
		map[string]any{"type": "FileStored", "data_base64": "AAH+/w=="})
	add("rotation: the second of two keys", secretA, sent(webhook.PublisherConfig{Secrets: []string{secretB, secretA}}, jsonMsg), true,
		map[string]any{"type": "OrderPlaced"})
	add("CloudEvent", secretA, sent(webhook.PublisherConfig{Secrets: []string{secretA}, CloudEvents: &cloudevents.Config{Source: "/shop"}}, jsonMsg), true,
		map[string]any{"type": "OrderPlaced", "subject": "order-42", "couriertopic": "orders", "specversion": "1.0"})
	add("raw JSON payload", secretA, sent(webhook.PublisherConfig{Secrets: []string{secretA}, Body: webhook.BodyRaw}, jsonMsg), true,
		map[string]any{"order_id": "order-42"})
	changed := env
	changed.body = bytes.Replace(env.body, []byte(`"OrderPlaced"`), []byte(`"OrderCancelled"`), 1)
	add("type changed", secretA, changed, false, nil)
	add("another endpoint's secret", secretB, env, false, nil)

	casesFile := filepath.Join(dir, "cases.json")
	b, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(casesFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "verify.js")
	if err := os.WriteFile(script, []byte(verifyJS), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script, casesFile)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, stderr.String())
	}
	var results []struct {
		Name    string         `json:"name"`
		OK      bool           `json:"ok"`
		Error   string         `json:"error"`
		Payload map[string]any `json:"payload"`
	}
	if err := json.Unmarshal(out, &results); err != nil {
		t.Fatalf("node printed %s: %v", out, err)
	}
	if len(results) != len(cases) {
		t.Fatalf("%d results for %d cases", len(results), len(cases))
	}
	for i, r := range results {
		tc := cases[i]
		switch {
		case tc.valid && !r.OK:
			t.Errorf("%s: standardwebhooks refused it: %s", tc.Name, r.Error)
		case !tc.valid && r.OK:
			t.Errorf("%s: standardwebhooks verified it", tc.Name)
		}
		for k, v := range tc.want {
			got, _ := json.Marshal(r.Payload[k])
			want, _ := json.Marshal(v)
			if !bytes.Equal(got, want) {
				t.Errorf("%s: standardwebhooks parsed %s = %s, want %s", tc.Name, k, got, want)
			}
		}
	}
}
