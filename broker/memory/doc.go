// Package memory is a broker in memory: a [broker.Publisher] that keeps what
// it is sent and fails on demand, for unit tests of a relay (or of code that
// publishes) that should run in milliseconds. Faults follow the broker
// package's contract: an outage wraps [broker.ErrUnavailable], a permanent
// refusal wraps [broker.ErrRejected], any other failure is a refusal that
// counts against the message.
//
//	pub := memory.NewPublisher()
//	pub.FailNext(3)          // the next three messages meet an outage
//	pub.Reject(poison.ID)    // refused for good: a dead letter at once
//	pub.Hold()               // publishes wait …
//	pub.Release()            // … until released
//	got := pub.Messages()    // what the broker acknowledged, in order
//	pub.Forget(lost.ID)      // as a broker that lost an acknowledged message
//
// It is no substitute for tests against the real broker: it accepts any
// subject, size and header.
package memory
