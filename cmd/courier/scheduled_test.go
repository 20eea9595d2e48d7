package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/mysql"
	"github.com/courier-go/courier/store/postgres"
	"github.com/courier-go/courier/store/sqlite"
)

// sqlInserters are the database/sql inserters of the dialects of
// dlqDatabases.
var sqlInserters = map[string]store.Inserter[*sql.Tx]{
	"postgres": postgres.DatabaseSQL(), "sqlite": sqlite.DatabaseSQL(), "mysql": mysql.DatabaseSQL(),
}

// courier scheduled lists the scheduled messages that wait, filtered and
// as JSON, and cancels them by id, saying which could not be; courier
// status counts them and --fail-if-scheduled-late fails when one is late;
// bad input names the flag or the id.
func TestScheduledCommands(t *testing.T) {
	for name, open := range dlqDatabases(t) {
		t.Run(name, func(t *testing.T) {
			d := open(t)
			w := outbox.New(sqlInserters[name], outbox.Config{})
			ctx := context.Background()
			schedule := func(due store.Due, topic, key string) courier.Message {
				m := courier.NewMessage(topic, key, "Reminder", []byte("{}"))
				tx, err := d.db.BeginTx(ctx, nil)
				testenv.Must(t, err, "begin")
				testenv.Must(t, w.Schedule(ctx, tx, due, m), "schedule")
				testenv.Must(t, tx.Commit(), "commit")
				return m
			}
			a := schedule(outbox.After(time.Hour), "orders", "k1")
			b := schedule(outbox.After(2*time.Hour), "payments", "k2")
			late := schedule(outbox.At(time.Now().Add(-time.Minute)), "orders", "k3")
			db := []string{"--database-url", d.url}

			code, out, errOut := runCLI(t, append([]string{"scheduled", "list"}, db...)...)
			if code != 0 || strings.Index(out, late.ID.String()) > strings.Index(out, a.ID.String()) ||
				strings.Index(out, a.ID.String()) > strings.Index(out, b.ID.String()) || !strings.Contains(out, late.ID.String()) {
				t.Fatalf("scheduled list: exit %d, want the three in due order:\n%s%s", code, out, errOut)
			}
			code, out, _ = runCLI(t, append([]string{"scheduled", "list", "--json", "--topic", "orders"}, db...)...)
			var listed []store.ScheduledMessage
			testenv.Must(t, json.Unmarshal([]byte(out), &listed), "list json: "+out)
			if code != 0 || len(listed) != 2 || listed[0].ID != late.ID || listed[1].ID != a.ID || listed[1].Key != "k1" {
				t.Fatalf("scheduled list --json --topic orders: exit %d, %+v", code, listed)
			}
			code, st, errOut := statusJSONOf(t, append(db, "--fail-if-scheduled-late", "10s")...)
			if code != 1 || st.Scheduled.Waiting.N != 3 || st.Scheduled.Due != 1 || !strings.Contains(errOut, "--fail-if-scheduled-late") {
				t.Fatalf("status --fail-if-scheduled-late: exit %d, %+v, %s", code, st.Scheduled, errOut)
			}
			code, out, errOut = runCLI(t, append([]string{"scheduled", "cancel", a.ID.String()}, db...)...)
			if code != 0 || !strings.Contains(out, "cancelled") {
				t.Fatalf("scheduled cancel: exit %d\n%s%s", code, out, errOut)
			}
			code, out, errOut = runCLI(t, append([]string{"scheduled", "cancel", a.ID.String(), b.ID.String()}, db...)...)
			if code == 0 || !strings.Contains(out, a.ID.String()+" not cancelled: no scheduled message has this id") ||
				!strings.Contains(out, b.ID.String()+" cancelled") || !strings.Contains(errOut, "1 of 2 not cancelled") {
				t.Fatalf("scheduled cancel again: exit %d\n%s%s", code, out, errOut)
			}
			for _, args := range [][]string{{"scheduled", "cancel", "not-an-id"}, {"scheduled", "list", "--limit", "0"},
				{"scheduled", "list", "--after", "x"}, {"scheduled", "list", "--due-within", "-1h"}} {
				if code, _, errOut := runCLI(t, append(args, db...)...); code == 0 || errOut == "" {
					t.Fatalf("%v: exit %d, %q; want an error", args, code, errOut)
				}
			}
		})
	}
}
