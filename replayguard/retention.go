package replayguard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/store"
)

// DefaultRetention is the inbox's marker retention the check assumes
// when the operator names none: inbox.ConsumerConfig's default.
const DefaultRetention = inbox.DefaultRetention

// Stale reports whether the consumer-side letter l was parked longer ago
// than retention (the inbox's ConsumerConfig.Retention) at now: the
// consumer deletes the inbox markers older than that, so a marker of its
// message (written when a redelivery of it was applied meanwhile) may be
// gone, and its replay may apply it twice. A relay-side letter, or a
// retention of 0 or less (markers never deleted), is never stale.
func Stale(l Letter, now time.Time, retention time.Duration) bool {
	return !l.Relay && retention > 0 && now.Sub(l.ParkedAt) > retention
}

// CheckRetention refuses, unless force, a replay of letters any of which
// is Stale, naming them (the first few), how long ago they were parked
// and the retention, and the fix (flag names the option that forces it:
// "--force").
func CheckRetention(letters []Letter, now time.Time, retention time.Duration, force bool, flag string) error {
	if force {
		return nil
	}
	var stale []string
	for _, l := range letters {
		if Stale(l, now, retention) {
			stale = append(stale, fmt.Sprintf("%s (parked %s ago)", l.Ref, Age(now.Sub(l.ParkedAt))))
		}
	}
	if len(stale) == 0 {
		return nil
	}
	more := ""
	if len(stale) > 5 {
		more = fmt.Sprintf(" and %d more", len(stale)-5)
		stale = stale[:5]
	}
	return fmt.Errorf("%s%s parked longer ago than the inbox's marker retention (%s): the marker of a message applied meanwhile may be deleted, so a replay may apply it twice; check that it was not applied (courier dlq show), then replay it with %s, or leave it out",
		strings.Join(stale, ", "), more, Age(retention), flag)
}

// Age renders a duration in days and hours when it is that long, to the
// second when it is longer than a minute, to the millisecond otherwise.
func Age(d time.Duration) string {
	if d >= 24*time.Hour {
		days := d / (24 * time.Hour)
		h := (d - days*24*time.Hour) / time.Hour
		if h == 0 {
			return fmt.Sprintf("%dd", days)
		}
		return fmt.Sprintf("%dd%dh", days, h)
	}
	if d < time.Minute {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// DatabaseOutcome tells a replay's outcome from what the database holds:
// relay side, where Operations.Locate finds the message (pending: not
// yet; a dead letter: failed again; published or gone: succeeded);
// consumer side, the parked delivery (gone: applied; its replay request
// withdrawn: failed again).
func DatabaseOutcome(db store.Database) func(ctx context.Context, l Letter) (Outcome, string, error) {
	return func(ctx context.Context, l Letter) (Outcome, string, error) {
		if !l.Relay {
			p, err := db.Admin().ParkedMessage(ctx, l.ID)
			return ParkedOutcome(p, err, l.Consumer)
		}
		places, err := db.Operations().Locate(ctx, []string{l.MessageID})
		if err != nil {
			return Pending, "", err
		}
		switch places[l.MessageID] {
		case store.PlacePending:
			return Pending, "waiting to be published", nil
		case store.PlaceDeadLetter:
			return FailedAgain, "dead again", nil
		}
		return Succeeded, "published", nil
	}
}

// ParkedOutcome tells a consumer-side replay's outcome from its parked
// delivery p as read again (err: that read's error): gone, it was applied
// by consumer; its replay request withdrawn, it failed again; held behind
// another parked delivery (inbox.ConsumerConfig.HoldKeys), it waits for
// that one's replay, which the consumer does first.
func ParkedOutcome(p store.Parked, err error, consumer string) (Outcome, string, error) {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return Succeeded, "applied by consumer " + consumer, nil
	case err != nil:
		return Pending, "", err
	case p.Reason == store.ReasonHeld && p.Behind != 0:
		return Pending, fmt.Sprintf("held behind consumer:%d, which the consumer replays first", p.Behind), nil
	case p.ReplayRequested == nil:
		return FailedAgain, "replay failed, still parked: " + strings.Join(strings.Fields(p.Error), " "), nil
	}
	return Pending, "replay requested", nil
}
