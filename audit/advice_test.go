package audit_test

import (
	"strings"
	"testing"

	"github.com/courier-go/courier/audit"
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
