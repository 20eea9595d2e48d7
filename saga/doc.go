// Package saga runs orchestrated sagas: a workflow across services that
// ends either completed or compensated, whatever duplicates, delays,
// reorderings and losses its messages suffer.
//
// A Definition lists the steps in order. Each step sends a command (through
// the outbox, in the same transaction as the transition) and waits for a
// reply: its success event moves the saga on, its failure event (or its
// deadline passing) turns the saga back, compensating in reverse order the
// steps that took effect. Each instance is a row with a version; every
// transition is one transaction that loads it, checks that the event is the
// one its state is waiting for, applies it, writes the outgoing commands to
// the outbox and bumps the version, failing with ErrConflict if another
// transition got there first (the caller retries: the inbox redelivers).
//
// Events the state is not waiting for are ignored and recorded in the
// instance's history with the reason: a duplicate of a reply already
// applied, a reply that arrives after its step timed out, a reply to a step
// not yet started. Nothing runs twice: a step's command is sent once, except
// for retriable steps; a compensation is sent until it is confirmed, and
// receivers must make it idempotent by business key (refund the order's
// charge if there is one, once), which also makes a compensation of a step
// that timed out safe whether or not the step took effect.
//
// # Compensatable, pivot and retriable steps
//
// Steps before the pivot are compensatable: they have a Compensate command,
// and a failure later undoes them. The pivot is the first step without one:
// once it succeeds the saga can only go forward, and since its effect could
// not be undone it must not time out (no Timeout; New refuses a step that
// could time out with nothing to undo it). Steps after the pivot must
// eventually succeed: mark them Retriable, and a failure or a timeout sends
// their command again instead of compensating. A step that times out is
// compensated too (its effect is unknown), so its compensation must tolerate
// "nothing to undo". In the reference shop every step is compensatable
// (refund the charge, release the stock, cancel the shipment), so any step
// may time out; the saga completes when the shipment is ready.
//
// # Where it runs
//
// Start opens an instance inside the caller's transaction (with the request
// that asked for it, behind an Idempotency-Key). Handle applies a reply
// inside an inbox handler's transaction, so the reply's dedup marker, the
// transition and the next command commit together; when a step's functions
// (Command, OnReply, Compensate) panic there, the inbox.Consumer recovers
// the panic, the transition rolls back, and the reply is retried and then
// parked like any failing one. Run fires deadlines, by the time of
// Config.Clock: a test moves that clock and calls Expire instead of waiting
// for a step to time out.
package saga
