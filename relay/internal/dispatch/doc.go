// Package dispatch is the core both relays share: the polling relay
// (package relay), whose source is claimed batches of rows, and the CDC
// relay (package relay/cdc), whose source is PostgreSQL's log. A source
// hands the Dispatcher the next messages of its keys; the Dispatcher
// publishes them key by key and decides, once for both, what every failure
// means. What a source does with the outcome (mark rows, schedule a retry,
// release a lease, hold a key in memory, confirm a log position) is its own.
//
// # Rounds
//
// A round is one call to the broker: every key's next message, or, to a
// publisher that keeps a key's order when several of its messages are in
// flight (broker.OrderKeeper), its next run of messages to one topic. A
// message that fails holds the rest of its key's run back (pipelined, the
// broker stored none of them); other keys never wait.
//
// # Failures
//
// One policy, for both relays:
//
//   - An outage (broker.ErrUnavailable: the broker unreachable, timed out,
//     not ready) is not counted against the message. It is retried after
//     the broker's own estimate when it gives one (broker.RetryAfterError:
//     an HTTP Retry-After, an open circuit breaker's remaining time), else
//     after the backoff of the outage so far. While every message of a
//     round fails that way the relay pauses, for the same time.
//   - A refusal for good (broker.ErrRejected without ErrUnavailable) makes
//     the message a dead letter at once.
//   - Any other failure is counted: the message is retried after
//     Backoff.Delay(attempts), or after the broker's estimate if that is
//     longer (capped at Backoff.Max), and becomes a dead letter after
//     MaxAttempts counted failures.
//
// A dead letter of a topic the configuration's HoldKeys names holds its
// key (Failure.Hold, which the source passes on to the store): the key's
// later messages wait behind it until it is replayed or discarded. Such a
// topic is sent one message of a key per round, never in runs: a
// publisher that keeps a key's order would store the messages of a run
// after one it refuses for good.
//
// Every call to the broker is a send span (see package relay, Tracing) and
// is reported to the Observer.
package dispatch
