package store

import (
	"context"
	"time"
)

// LocalNotifier wakes a relay that runs in the same process as the writers:
// the wake-up of a database without a notification channel of its own
// (SQLite, MySQL/MariaDB), or of a PostgreSQL setup that prefers not to
// LISTEN. Writers call [LocalNotifier.Signal] after inserting messages, most
// simply by setting outbox.Config.Notify to it; the relay passes the
// notifier as relay.Config.Notifier and waits on [LocalNotifier.Wake].
//
// A signal arrives after the insert but before the writer commits, so the
// claim it triggers may not see the rows yet. Run therefore wakes the relay
// again 1, 3, 7, 15, … 255 ms after the latest signal (each gap twice the
// one before): a transaction that commits d after its insert, for d up to
// about a quarter of a second, is picked up at most about d after its
// commit (within milliseconds for the usual short transaction), and a later
// commit at the relay's next poll (relay.Config.PollInterval). A rolled-back
// transaction costs the relay a few empty claims. Writers in other processes
// reach the relay only through its polling.
//
// Arm always succeeds and Disarm does nothing: a signal costs the writer two
// non-blocking channel sends, so there is nothing to switch off while the
// relay is busy. One LocalNotifier serves one relay; to wake several, signal
// each of them. The zero value is not usable; call [NewLocalNotifier].
type LocalNotifier struct {
	wake    chan struct{} // to the relay
	signals chan struct{} // to Run, which schedules the follow-up wake-ups
}

var _ Notifier = (*LocalNotifier)(nil)

// Follow-up wake-ups after a signal: the first after followUpFirst, each
// later one twice as far apart, the last at most followUpLast after the
// previous one.
const (
	followUpFirst = time.Millisecond
	followUpLast  = 128 * time.Millisecond
)

// NewLocalNotifier returns a LocalNotifier ready for Signal and Run.
func NewLocalNotifier() *LocalNotifier {
	return &LocalNotifier{wake: make(chan struct{}, 1), signals: make(chan struct{}, 1)}
}

// Signal tells the relay that messages were written. It never blocks and is
// safe to call from any goroutine, any number of times: signals that arrive
// while the relay is busy are merged into one.
func (n *LocalNotifier) Signal() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
	select {
	case n.signals <- struct{}{}:
	default:
	}
}

// Wake implements Notifier.
func (n *LocalNotifier) Wake() <-chan struct{} { return n.wake }

// Arm implements Notifier; it always reports true.
func (n *LocalNotifier) Arm(context.Context) (bool, error) { return true, nil }

// Disarm implements Notifier; it does nothing.
func (n *LocalNotifier) Disarm(context.Context) error { return nil }

// Run implements Notifier: it sends the follow-up wake-ups of each signal
// until ctx is done, then returns ctx's error. Without Run, signals still
// wake the relay once, before the writer's commit.
func (n *LocalNotifier) Run(ctx context.Context) error {
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	var delay time.Duration // 0: no follow-up scheduled
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-n.signals:
			delay = followUpFirst
			t.Reset(delay)
		case <-t.C:
			select {
			case n.wake <- struct{}{}:
			default:
			}
			if delay *= 2; delay <= followUpLast {
				t.Reset(delay)
			} else {
				delay = 0
			}
		}
	}
}
