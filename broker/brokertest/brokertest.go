package brokertest

import (
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
)

// Features is what a broker promises beyond what every broker must do. Each
// broker package declares its Features in one place (its conformance test,
// mirrored in its package documentation); the suite tests each one claimed
// and skips the tests of those not claimed.
type Features struct {
	// Dedup: the broker drops a re-publication of a message id (within
	// its deduplication window), so a message the relay publishes twice is
	// stored once.
	Dedup bool
	// PerKeyOrder: messages of one key from one publisher reach a
	// subscriber in the order they were published.
	PerKeyOrder bool
	// OversizeBytes, when above 0, is a payload size the broker refuses
	// (larger than the broker or the destination accepts).
	OversizeBytes int
	// OversizeRejected: the refusal of an oversize message is permanent
	// and wraps broker.ErrRejected (else it is a counted failure).
	OversizeRejected bool
	// RedeliversAfter, when above 0, is how long the broker waits for an
	// acknowledgement before it redelivers to the same, still open
	// subscriber (JetStream's AckWait). 0: an unacknowledged delivery comes
	// again only after Close (or a rebalance).
	RedeliversAfter time.Duration
	// AttemptsSurviveClose: the broker counts deliveries itself, so a
	// delivery that comes again to a new subscriber has an Attempt above 1.
	// Without it Attempt is counted by the subscriber and starts at 1 again.
	AttemptsSurviveClose bool
	// Serial runs the suite's tests one after the other instead of in
	// parallel.
	Serial bool
}

// Harness is how the suite reaches a broker.
type Harness struct {
	// Features the broker claims.
	Features Features
	// New builds a fresh destination for one test, removed when the test
	// ends (t.Cleanup), and returns how to reach it.
	New func(t testing.TB) Instance
	// Timing is the default timing of the broker's consumers that share
	// keys (Instance.SharedRecipe): the pause sweep runs with it under
	// Long.
	Timing Timing
	// ShortTiming is a shorter timing the pause sweep runs with, by
	// default and under Long; required with Instance.SharedRecipe.
	ShortTiming Timing
	// Long runs the long version of the pause sweep: the default Timing
	// too, every cut as long as every pause, each case ten times. A
	// broker's tests set it from their -long flag; CI runs the short one.
	Long bool
}

// Instance is one test's fresh destination.
type Instance struct {
	// Topic is the message topic that leads to the destination; the suite
	// publishes every message on it.
	Topic string
	// Publisher publishes to the broker.
	Publisher broker.Publisher
	// Subscribe, when set, returns a new subscriber that receives the
	// destination's messages. Every subscriber of one Instance belongs to
	// the same consumer (durable consumer, consumer group, queue): a
	// delivery one of them did not acknowledge comes to the next. The suite
	// closes each subscriber it gets; the harness may close it again in
	// t.Cleanup.
	Subscribe func(t testing.TB) broker.Subscriber
	// Stored, when set, returns the messages the destination holds, in
	// order, decoded, duplicates included. The suite counts what was stored
	// with it (Dedup, the messages around an oversize one) and uses it in
	// place of a subscriber where there is none.
	Stored func(t testing.TB) []courier.Message
	// Unreachable, when set, makes the broker unreachable and returns a
	// publisher that then publishes to it: Publisher after the broker has
	// been stopped, or a publisher pointed at an address nothing answers.
	Unreachable func(t testing.TB) broker.Publisher
	// SubscribeShared, when set, returns a new instance of a consumer of
	// the destination whose instances share the keys (a
	// broker.KeySharer): each call is one more instance of the same
	// consumer. The suite closes each one it gets.
	SubscribeShared func(t testing.TB) broker.Subscriber
	// SharedRecipe, when set, describes such a consumer of the
	// destination for an instance that runs as a process of its own: the
	// pause sweep starts the test binary again as such instances, and
	// TestMain hands them to Child with the Opener that reads it.
	SharedRecipe string
	// BrokerAddrs are the host:port addresses the instances of
	// SharedRecipe connect to: the pause sweep cuts an instance's
	// connections with a proxy in front of each (Process.Dial). Empty:
	// no cuts.
	BrokerAddrs []string
}

// Run runs the suite, one subtest per behaviour, each on a destination of
// its own from h.New.
func Run(t *testing.T, h Harness) {
	if h.New == nil {
		t.Fatal("brokertest: Harness.New is nil: give a function that builds a fresh destination")
	}
	tests := []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"PublishAndAck", testPublishAndAck},
		{"RoundTrip", testRoundTrip},
		{"Dedup", testDedup},
		{"Unreachable", testUnreachable},
		{"Oversize", testOversize},
		{"UnackedRedelivered", testUnackedRedelivered},
		{"UnackedRedeliveredWhileOpen", testRedeliveredWhileOpen},
		{"Retry", testRetry},
		{"AckedNotRedelivered", testAckedNotRedelivered},
		{"PerKeyOrder", testPerKeyOrder},
		{"PipelinedKeyOrder", testPipelinedKeyOrder},
		{"SharedKeys", testSharedKeys},
		{"PausedInstance", testPausedInstance},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !h.Features.Serial {
				t.Parallel()
			}
			tc.fn(t, h)
		})
	}
}
