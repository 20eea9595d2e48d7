// Package memstore is an outbox in memory: a [store.RelayStore] and a
// [store.Inserter] for its own transaction type ([Tx]), with the semantics
// of the SQL dialects, for unit tests that should run in milliseconds. It
// lets a program test its wiring (outbox writer, relay, publisher) and its
// reactions to failures without a database; it never replaces tests on the
// database the program runs on.
//
//	clock := memstore.NewClock()
//	st := memstore.New(memstore.Config{Clock: clock.Now})
//	n := st.NewNotifier() // signalled after each commit
//	w := outbox.New(st, outbox.Config{})
//	if err := st.InTx(ctx, func(tx *memstore.Tx) error { return w.Write(ctx, tx, msg) }); err != nil {
//		t.Fatal(err)
//	}
//	r, err := relay.New(st, publisher, relay.Config{Notifier: n})
//	if err != nil {
//		t.Fatal(err)
//	}
//	clock.Advance(time.Minute) // leases and retries fall due without sleeping
//
// # Semantics
//
// They are the dialects' (see store/postgres), and the relay store's part of
// their conformance suite (storetest.ExerciseRelayStore) holds the store in
// memory to them too: a claim leases rows to an owner until the clock passes
// the lease's end, takes a key's rows in Seq order and none of them while
// another row of the key is leased or waiting for a retry, and takes a row
// whose retry has come due alone, without the rows of its key behind it.
// Complete does nothing unless the lease is still live and its owner's;
// ending the lease releases the rows the outcome does not mention.
// Publishing deletes a row (and copies it to the published rows with
// Config.KeepPublished); a dead letter keeps the row's attempts and its
// history of failures, the latest 20 of them. A dead letter made by a
// failure with store.Failure.Hold holds its key: claims leave the key
// alone and move its rows behind the dead letter (Stats counts them:
// HeldKeys, Held, OldestHold), and [Store.ReplayDeadLetter] or
// [Store.DiscardDeadLetter] puts them back, in order, with new Seqs (see
// package relay, Ordering).
//
// Seq is allocated when a row is inserted and the row becomes visible when
// its transaction commits, so concurrent transactions behave like
// unserialised writers on PostgreSQL (package relay, Ordering). A claim
// looks at every free row, where the dialects stop after a window of
// max(25×limit, 25,000) rows; that bound is a cost, not a guarantee.
//
// [Store.Operations] is the operators' view of the outbox in memory
// (store.Operations: status, reconciliation of leases and retried rows,
// trims of published copies and dead letters, the published copies and
// places an audit reads), as the dialects give it.
//
// Every operation takes the store's mutex and reads the clock once, so
// claims and completions are atomic with respect to each other. An
// operation whose context has ended fails with the context's error, as a
// database call would.
package memstore
