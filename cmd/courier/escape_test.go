package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier/internal/escape"
	"github.com/courier-go/courier/internal/testenv"
)

// hostile is what a remote endpoint or a broker may hand over: an escape
// sequence that sets the terminal's title, a carriage return that lets a
// later text overwrite an earlier one, a C1 CSI, and a bidi override.
const hostile = "\x1b]0;pwn\a\rFAKE \u009b2J \u202egnp.exe"

// What the CLI prints of stored or remote text reaches the operator's
// terminal escaped: dead letters' errors, topics, keys, types, headers,
// consumers, subjects and payloads, in list, show, replay and discard, the
// replay runs' selections and notes (dlq runs), in status and reconcile,
// and in the JSON those commands print.
func TestStoredTextIsEscaped(t *testing.T) {
	d := dlqDatabases(t)["sqlite"](t)
	now := time.Now().UnixMicro()
	old := time.Now().Add(-time.Hour).UnixMicro()
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO courier_outbox_dead_letters (id, message_id, topic, ordering_key, type, version, content_type, payload, headers, occurred_at, created_at, attempts, last_error, history, dead_at)
VALUES (41, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, 10, ?, ?, ?)`, []any{"id" + hostile, "orders" + hostile, "key" + hostile, "Type" + hostile, "text/plain" + hostile,
			[]byte("payload\n" + hostile), jsonOf(t, map[string]string{"X-Trace": hostile}), now, now, "HTTP 500: " + hostile,
			jsonOf(t, []map[string]any{{"at": "2026-11-29T10:00:00Z", "error": hostile, "counted": true}}), now}},
		{`INSERT INTO courier_inbox_dead_letters (id, consumer, message_id, subject, headers, payload, reason, last_error, attempts, parked_at, ordering_key)
VALUES (1, ?, ?, ?, ?, ?, ?, ?, 5, ?, ?)`, []any{"billing" + hostile, "mid" + hostile, "courier.payments" + hostile,
			jsonOf(t, map[string][]string{"Courier-Type": {"Charge" + hostile}, "X-Note": {hostile}}), "x" + hostile, "failed" + hostile, "declined" + hostile, now,
			"key" + hostile}},
		{`INSERT INTO courier_outbox (message_id, topic, ordering_key, type, version, content_type, payload, occurred_at, created_at, attempts, retry_at, last_error)
VALUES ('01939f3a-0000-7000-8000-000000000099', ?, ?, 'T', 1, 'text/plain', x'00', ?, ?, 7, ?, ?)`,
			[]any{"pending" + hostile, "k" + hostile, old, old, now + int64(time.Hour/time.Microsecond), "refused: " + hostile}},
		{`INSERT INTO courier_replay_runs (side, selection, state, total, replayed, failed, note, started_at, updated_at)
VALUES ('relay', ?, 'stopped', 2, 1, 1, ?, ?, ?)`, []any{"topic " + hostile, "stopped: " + hostile, now, now}},
	} {
		_, err := d.db.Exec(q.sql, q.args...)
		testenv.Must(t, err, "seed")
	}
	db := []string{"--database-url", d.url}
	for _, args := range [][]string{
		{"dlq", "list"},
		{"dlq", "show", "relay:41"},
		{"dlq", "show", "consumer:1"},
		{"dlq", "replay", "--all", "--dry-run"},
		{"dlq", "discard", "--all", "--dry-run"},
		{"dlq", "runs"},
		{"status"},
		{"reconcile", "--retry-attempts", "1", "--retry-age", "1s"},
	} {
		code, out, errOut := runCLI(t, append(args, db...)...)
		if code != 0 {
			t.Errorf("courier %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
			continue
		}
		if r, ok := unsafeRune(out); ok {
			t.Errorf("courier %s printed %U raw:\n%q", strings.Join(args, " "), r, out)
		}
		if !strings.Contains(out, `\u202e`) {
			t.Errorf("courier %s does not show the stored text, escaped:\n%s", strings.Join(args, " "), out)
		}
	}
	for _, args := range [][]string{{"dlq", "list", "--json"}, {"dlq", "show", "--json", "relay:41"}, {"dlq", "runs", "--json"}, {"status", "--json"}} {
		code, out, errOut := runCLI(t, append(args, db...)...)
		if r, ok := unsafeRune(out); code != 0 || ok {
			t.Errorf("courier %s: exit %d, printed %U raw:\n%q%s", strings.Join(args, " "), code, r, out, errOut)
		}
		if !json.Valid([]byte(out)) || !strings.Contains(out, `\u202e`) {
			t.Errorf("courier %s: not JSON with the text escaped:\n%s", strings.Join(args, " "), out)
		}
	}
	var shown struct {
		LastError string `json:"last_error"`
	}
	_, out, _ := runCLI(t, append([]string{"dlq", "show", "--json", "relay:41"}, db...)...)
	if err := json.Unmarshal([]byte(out), &shown); err != nil || shown.LastError != "HTTP 500: "+hostile {
		t.Errorf("dlq show --json decodes to %q, %v; want the stored error as it is", shown.LastError, err)
	}
	// An error that quotes remote text is escaped on stderr too.
	_, _, errOut := runCLI(t, append([]string{"dlq", "replay", "consumer:1", "--new-id"}, db...)...)
	if r, ok := unsafeRune(errOut); ok {
		t.Errorf("error printed %U raw: %q", r, errOut)
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	testenv.Must(t, err, "encode")
	return string(b)
}

// unsafeRune returns the first character of s a terminal would act on,
// other than the newlines that end the lines.
func unsafeRune(s string) (rune, bool) {
	for _, r := range s {
		if r != '\n' && escape.Unsafe(r) {
			return r, true
		}
	}
	return 0, false
}
