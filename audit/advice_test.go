package audit_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier/audit"
	"github.com/courier-go/courier/store"
)

// Every kind a watch finds has a title and advice that says what to do,
// and only duplicates are no alarm.
func TestAdvice(t *testing.T) {
	for _, k := range audit.Kinds {
		if audit.Title(k) == k || len(audit.Advice(k)) < 100 {
			t.Errorf("kind %s: title %q, advice %q", k, audit.Title(k), audit.Advice(k))
		}
		if audit.IsAlarm(k) == (k == audit.KindDuplicate) {
			t.Errorf("kind %s: IsAlarm %v", k, audit.IsAlarm(k))
		}
	}
	if audit.Advice("nonsense") != "" || audit.Title("nonsense") != "nonsense" {
		t.Error("an unknown kind has advice")
	}
	if !strings.Contains(audit.Advice(audit.KindLost), "Publish it again") {
		t.Error("the advice on a lost message does not say to publish it again")
	}
}

// A watch has stopped once it saved nothing for three of its intervals
// (the default interval when it saved none).
func TestStopped(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		interval, ago time.Duration
		want          bool
	}{{time.Second, 3 * time.Second, false}, {time.Second, 3*time.Second + 1, true}, {0, 45 * time.Second, false}, {0, 46 * time.Second, true}} {
		if got := audit.Stopped(store.AuditWatch{Interval: c.interval, UpdatedAt: now.Add(-c.ago)}, now); got != c.want {
			t.Errorf("interval %s, saved %s ago: stopped %v, want %v", c.interval, c.ago, got, c.want)
		}
	}
}

// docs/operations.md gives each kind's advice as Advice says it.
func TestAdviceInOperations(t *testing.T) {
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range audit.Kinds {
		if !strings.Contains(string(doc), "| "+strings.ToLower(audit.Title(k))+" | "+audit.Advice(k)+" |") {
			t.Errorf("docs/operations.md lacks the advice on %s as Advice gives it", k)
		}
	}
}
