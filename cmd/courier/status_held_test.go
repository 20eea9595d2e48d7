package main

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/dburl"
)

// holdKey makes, in the database at url, a dead letter of topic and key
// that holds its key, with later messages of the key held behind it, as
// a relay that holds topic's keys does; it returns the dead letter's id.
func holdKey(t *testing.T, url, topic, key string, later int) int64 {
	t.Helper()
	ctx := context.Background()
	d, err := dburl.Open(ctx, url, dburl.Options{})
	testenv.Must(t, err, "open "+url)
	defer d.Close()
	msgs := make([]courier.Message, 1+later)
	for i := range msgs {
		msgs[i] = courier.NewMessage(topic, key, fmt.Sprintf("T%d", i), fmt.Appendf(nil, `{"n":%d}`, i))
	}
	testenv.Must(t, d.InTx(ctx, func(tx *sql.Tx) error { return d.Inserter().Insert(ctx, tx, msgs) }), "write")
	rs, err := d.RelayStore(ctx, store.RelayConfig{})
	testenv.Must(t, err, "relay store")
	b, err := rs.Claim(ctx, "relay-1", 1, time.Minute)
	testenv.Must(t, err, "claim")
	if len(b.Records) != 1 || b.Records[0].Message.ID != msgs[0].ID {
		t.Fatalf("claimed %d rows, want %s/%s's first", len(b.Records), topic, key)
	}
	cause := b.Records[0].Seq
	testenv.Must(t, rs.Complete(ctx, "relay-1", b.Lease, store.Outcome{Dead: []store.Failure{
		{Seq: cause, Error: "rejected: " + key + " is poison", Counted: true, Hold: true}}}), "die holding the key")
	// The next claim finds the key held and moves its rows behind it.
	b, err = rs.Claim(ctx, "relay-1", 100, time.Minute)
	testenv.Must(t, err, "claim")
	if len(b.Records) != 0 {
		t.Fatalf("claimed %d rows of a held key, want none", len(b.Records))
	}
	return cause
}

// backdate is the statement, in the dialect of name, that moves a dead
// letter's death two hours back.
func backdate(name string) string {
	switch name {
	case "postgres":
		return `UPDATE courier_outbox_dead_letters SET dead_at = dead_at - interval '2 hours' WHERE id = $1`
	case "mysql":
		return `UPDATE courier_outbox_dead_letters SET dead_at = dead_at - INTERVAL 2 HOUR WHERE id = ?`
	}
	return `UPDATE courier_outbox_dead_letters SET dead_at = dead_at - 7200000000 WHERE id = ?`
}

// Status shows the held keys and messages per topic and in all, in its
// table and its JSON, on every dialect; --fail-if-held-older-than fails
// once the oldest has been held longer than its limit, naming its topic,
// key and dead letter and how to release it, and passes below the limit
// and once the key is released.
func TestStatusHeldKeys(t *testing.T) {
	for name, open := range dlqDatabases(t) {
		t.Run(name, func(t *testing.T) {
			d := open(t)
			db := []string{"--database-url", d.url}
			code, st, errOut := statusJSONOf(t, append(db, "--fail-if-held-older-than", "1ns")...)
			if code != 0 || st.HeldKeys != 0 || st.Held != 0 || st.OldestHoldAgeS != 0 || st.Failed != nil {
				t.Fatalf("status of a database that holds no key: exit %d, %+v, %s", code, st, errOut)
			}
			young := holdKey(t, d.url, "payments", "acct-7", 1)
			old := holdKey(t, d.url, "orders", "order-<9>", 3)
			_, err := d.db.Exec(backdate(name), old)
			testenv.Must(t, err, "backdate")

			code, st, errOut = statusJSONOf(t, db...)
			if code != 0 || st.HeldKeys != 2 || st.Held != 4 || st.Outbox.HeldKeys != 2 || st.Outbox.Held != 4 ||
				st.OldestHoldAgeS < 7200 || st.OldestHoldAgeS > 7300 || st.DeadLetters != 2 {
				t.Fatalf("status: exit %d, %+v, %s; want 2 held keys, 4 held messages, the oldest 2h ago", code, st, errOut)
			}
			for _, ts := range st.Topics {
				if want := map[string]int64{"orders": 3, "payments": 1}[ts.Topic]; ts.HeldKeys != 1 || ts.Held != want || ts.OldestHold.IsZero() {
					t.Fatalf("topic %+v, want 1 held key and %d held messages", ts, want)
				}
			}
			code, out, errOut := runCLI(t, append([]string{"status"}, db...)...)
			if code != 0 || !strings.Contains(out, "held keys") || !strings.Contains(out, "oldest hold") {
				t.Fatalf("status table lacks the held keys: exit %d\n%s%s", code, out, errOut)
			}
			for _, line := range strings.Split(out, "\n") {
				f := strings.Fields(line)
				if len(f) > 0 && f[0] == "orders" && (len(f) != 9 || f[6] != "1" || f[7] != "3" || !strings.HasPrefix(f[8], "2h0m")) {
					t.Fatalf("status' orders line %q, want 1 held key, 3 held, held for 2h", line)
				}
				if len(f) > 0 && f[0] == "total" && (len(f) != 9 || f[6] != "2" || f[7] != "4") {
					t.Fatalf("status' total line %q, want 2 held keys, 4 held", line)
				}
			}

			// Both sides of the limit: held for 2h, it fails at 1h59m and
			// passes at 2h1m.
			code, st, errOut = statusJSONOf(t, append(db, "--fail-if-held-older-than", "119m")...)
			// The hold's age is read on the database's clock when status
			// runs: 2h and the seconds the test took so far.
			want := regexp.MustCompile(fmt.Sprintf(`^held keys \(relay side\): 2, the oldest \(topic "orders", key "order-<9>"\) has been held for 2h0m[0-9]+s, more than --fail-if-held-older-than 1h59m0s, behind dead letter relay:%d: courier dlq replay relay:%d publishes it, then the messages held behind it in order, or courier dlq discard relay:%d drops it and lets the key move on$`, old, old, old))
			if code != 1 || len(st.Failed) != 1 || !want.MatchString(st.Failed[0]) || !strings.Contains(errOut, st.Failed[0]) {
				t.Fatalf("status --fail-if-held-older-than 119m: exit %d, failed %q, stderr %s; want\n%s", code, st.Failed, errOut, want)
			}
			if code, st, errOut = statusJSONOf(t, append(db, "--fail-if-held-older-than", "121m")...); code != 0 || st.Failed != nil {
				t.Fatalf("status --fail-if-held-older-than 121m with the oldest held 2h: exit %d, failed %q, %s", code, st.Failed, errOut)
			}
			t.Setenv("COURIER_FAIL_IF_HELD_OLDER_THAN", "1h")
			if code, _, errOut = statusJSONOf(t, db...); code != 1 || !strings.Contains(errOut, "relay:"+fmt.Sprint(old)) {
				t.Fatalf("status with COURIER_FAIL_IF_HELD_OLDER_THAN=1h: exit %d, %s", code, errOut)
			}
			// Once the old key is released the young one is the oldest, and
			// it is under the limit.
			if code, out, errOut := runCLI(t, append([]string{"dlq", "discard", fmt.Sprintf("relay:%d", old)}, db...)...); code != 0 {
				t.Fatalf("dlq discard: exit %d\n%s%s", code, out, errOut)
			}
			code, st, errOut = statusJSONOf(t, db...)
			if code != 0 || st.HeldKeys != 1 || st.Held != 1 || st.OldestHoldAgeS > 60 || st.Failed != nil {
				t.Fatalf("status once relay:%d is discarded: exit %d, %+v, %s; want relay:%d's key alone, held for less than the limit", old, code, st, errOut, young)
			}
			if code, st, errOut = statusJSONOf(t, append(db, "--fail-if-held-older-than", "1ns")...); code != 1 || len(st.Failed) != 1 ||
				!strings.Contains(st.Failed[0], `(topic "payments", key "acct-7")`) || !strings.Contains(st.Failed[0], fmt.Sprintf("relay:%d", young)) {
				t.Fatalf("status --fail-if-held-older-than 1ns: exit %d, failed %q, %s", code, st.Failed, errOut)
			}
		})
	}
}

// --fail-if-held-older-than takes a positive duration, as the other
// durations of status do.
func TestStatusHeldFlagChecked(t *testing.T) {
	code, _, errOut := runCLI(t, "status", "--database-url", "sqlite://nowhere.db", "--fail-if-held-older-than=-1m")
	if code == 0 || !strings.Contains(errOut, "--fail-if-held-older-than is -1m0s: use a positive duration such as 5m, or leave it out") {
		t.Fatalf("status --fail-if-held-older-than -1m: exit %d, %s", code, errOut)
	}
}

// Over tenants, --fail-if-held-older-than checks each tenant: the one
// whose key has been held too long fails, named, the other passes; the
// table counts each tenant's held keys.
func TestStatusHeldKeysOverTenants(t *testing.T) {
	open := dlqDatabases(t)["sqlite"]
	held, calm := open(t), open(t)
	old := holdKey(t, held.url, "orders", "order-1", 2)
	_, err := held.db.Exec(backdate("sqlite"), old)
	testenv.Must(t, err, "backdate")
	tenants := []string{"--tenants", "held=" + held.url + ",calm=" + calm.url}

	code, out, errOut := runCLI(t, append([]string{"status", "--fail-if-held-older-than", "1h"}, tenants...)...)
	want := regexp.MustCompile(fmt.Sprintf(`tenant held: held keys \(relay side\): 1, the oldest \(topic "orders", key "order-1"\) has been held for 2h0m[0-9]+s, more than --fail-if-held-older-than 1h0m0s, behind dead letter relay:%d:`, old))
	if code != 1 || !want.MatchString(errOut) || strings.Contains(errOut, "tenant calm") {
		t.Fatalf("status over tenants --fail-if-held-older-than 1h: exit %d, stderr %s; want %s", code, errOut, want)
	}
	heldKeys := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 5 {
			heldKeys[f[0]] = f[5] // TENANT pending in-backoff oldest dead-letters held-keys …
		}
	}
	if !strings.Contains(out, "dead letters  held keys") || heldKeys["held"] != "1" || heldKeys["calm"] != "0" {
		t.Fatalf("status over tenants counts held keys %v, want held 1 and calm 0:\n%s", heldKeys, out)
	}
	if code, _, errOut = runCLI(t, append([]string{"status", "--fail-if-held-older-than", "3h"}, tenants...)...); code != 0 {
		t.Fatalf("status over tenants --fail-if-held-older-than 3h: exit %d, %s", code, errOut)
	}
}

// backdateHolds is the statement, in the dialect of name, that moves the
// holds of a consumer two hours back.
func backdateHolds(name string) string {
	switch name {
	case "postgres":
		return `UPDATE courier_inbox_holds SET since = since - interval '2 hours' WHERE consumer = $1`
	case "mysql":
		return `UPDATE courier_inbox_holds SET since = since - INTERVAL 2 HOUR WHERE consumer = ?`
	}
	return `UPDATE courier_inbox_holds SET since = since - 7200000000 WHERE consumer = ?`
}

// The keys consumers hold (inbox.ConsumerConfig.HoldKeys) are in the
// CONSUMERS table and under --fail-if-held-older-than, on both sides of
// its limit, which names the consumer and how to release its keys.
func TestStatusConsumerHeldKeys(t *testing.T) {
	for name, open := range dlqDatabases(t) {
		t.Run(name, func(t *testing.T) {
			d := open(t)
			ctx := context.Background()
			db := []string{"--database-url", d.url}
			sd, err := dburl.Open(ctx, d.url, dburl.Options{})
			testenv.Must(t, err, "open "+d.url)
			defer sd.Close()
			kh, ok := sd.ConsumerStore().(store.KeyHolds)
			if !ok {
				t.Fatalf("%s's consumer store holds no keys", name)
			}
			for i, key := range []string{"acct-1", "acct-1", "acct-1", "acct-2"} {
				p := store.Parked{Consumer: "ledger\x1b[31m", MessageID: fmt.Sprintf("01939f3a-0000-7000-8000-%012d", i), Subject: "accounts",
					Payload: []byte(`{}`), Reason: store.ReasonFailed, Error: "boom", Attempts: 3, Key: key}
				_, ok, err := kh.ParkHolding(ctx, p, false)
				testenv.Must(t, err, "park")
				if !ok {
					t.Fatalf("park %d: not parked", i)
				}
			}
			_, err = d.db.Exec(backdateHolds(name), "ledger\x1b[31m")
			testenv.Must(t, err, "backdate")

			code, out, errOut := runCLI(t, append([]string{"status"}, db...)...)
			if code != 0 {
				t.Fatalf("status: exit %d\n%s%s", code, out, errOut)
			}
			var line []string
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "ledger") {
					line = strings.Fields(l)
				}
			}
			// consumer, parked, replay asked, failing msgs, failures, oldest ("8ms ago"), held keys, held
			if len(line) != 9 || line[1] != "4" || line[7] != "2" || line[8] != "2" || strings.Contains(out, "\x1b") {
				t.Fatalf("status' ledger line %q, want 4 parked, 2 held keys, 2 held, escaped:\n%s", line, out)
			}
			code, st, errOut := statusJSONOf(t, append(db, "--fail-if-held-older-than", "119m")...)
			if code != 1 || len(st.Failed) != 1 || !regexp.MustCompile(`^held keys \(consumer ledger\\x1b\[31m\): 2, the oldest has been held for 2h0m[0-9]+s, more than --fail-if-held-older-than 1h59m0s`).MatchString(st.Failed[0]) ||
				!strings.Contains(st.Failed[0], `courier dlq list --consumer ledger\x1b[31m names them`) {
				t.Fatalf("status --fail-if-held-older-than 119m: exit %d, failed %q, %s", code, st.Failed, errOut)
			}
			if code, st, errOut = statusJSONOf(t, append(db, "--fail-if-held-older-than", "121m")...); code != 0 || st.Failed != nil {
				t.Fatalf("status --fail-if-held-older-than 121m with the oldest hold 2h old: exit %d, failed %q, %s", code, st.Failed, errOut)
			}
		})
	}
}
