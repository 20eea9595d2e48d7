package audit

import (
	"time"

	"github.com/courier-go/courier/store"
)

// Kinds lists the kinds of a WatchFinding, alarms first.
var Kinds = []string{KindLost, KindPhantom, KindOrderBreak, KindDuplicate}

// advice is each kind's title and what an operator does about it: the
// short form of the package documentation's "The findings, and what an
// operator does with each", which `courier status`, the dashboard's
// Delivery page and docs/operations.md show.
var advice = map[string][2]string{
	KindLost: {"Lost",
		"The broker lost a message it had acknowledged: consumers never saw it. Publish it again from its copy (courier_outbox_published; inboxes drop it where it did arrive), then fix the broker's durability: replicas, file storage, fsync, retention longer than the window."},
	KindPhantom: {"Phantom",
		"The broker holds a message the database does not know: after an asynchronous database failover, an event whose transaction was lost. Find its effects by message id in the consumers' inboxes and undo or reconcile them; replicate the database synchronously. Also what copies trimmed sooner than the broker's retention look like."},
	KindOrderBreak: {"Order break",
		"A key's message is on the broker after a later one of its key: consumers saw the later event first. Look for a dead letter replayed after later messages of its key, a copy published again by hand, partitions added to a Kafka topic or another publisher; check the consumers' state for the key."},
	KindDuplicate: {"Duplicate",
		"The broker holds a message more than once: a relay published it again after a crash or a lost lease. Inboxes apply it once; many of them mean relays crash or lose their leases often (courier_relay_lease_losses_total)."},
}

// Title returns the name people read for a finding of kind (KindLost:
// "Lost"), or kind itself for a kind it does not know.
func Title(kind string) string {
	if a, ok := advice[kind]; ok {
		return a[0]
	}
	return kind
}

// Advice returns, in a few sentences, what a finding of kind means and
// what an operator does about it (the package documentation says more);
// "" for a kind it does not know.
func Advice(kind string) string { return advice[kind][1] }

// IsAlarm reports whether a finding of kind is an alarm: what a consumer
// may have got wrong (lost, phantom, order break). Duplicates are not:
// inboxes apply a message once.
func IsAlarm(kind string) bool {
	return kind == KindLost || kind == KindPhantom || kind == KindOrderBreak
}

// StoppedAfter is how many of its intervals a watch may go without saving
// its state before Stopped says it has stopped.
const StoppedAfter = 3

// Stopped reports whether the saved watch w has stopped by now (the
// store's clock): it saved nothing for StoppedAfter intervals (its
// process ended, or its passes cannot save).
func Stopped(w store.AuditWatch, now time.Time) bool {
	interval := w.Interval
	if interval <= 0 {
		interval = DefaultInterval
	}
	return now.Sub(w.UpdatedAt) > StoppedAfter*interval
}
