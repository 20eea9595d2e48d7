// Package dashboard is Courier's web dashboard: an [http.Handler] built
// from a [store.Database] that shows operators the outbox and lets them act
// on what went wrong. `courier dashboard` serves it; a program can mount it
// in its own server instead.
//
// Its pages, rendered on the server with html/template and embedded in the
// binary (no JavaScript is needed):
//
//   - Overview: pending messages, the age of the oldest, leased and retried
//     rows, both kinds of dead letters, how fast the backlog and the dead
//     letters change between views, dead letters per topic.
//   - Dead letters (relay side: the broker kept rejecting them) and parked
//     messages (consumer side: a consumer gave up on them), filtered by
//     topic, consumer and error text; one with its headers, payload and
//     history of attempts; replay and discard, one or in bulk.
//   - Consumers with parked messages.
//   - Sagas: one instance's timeline of transitions and ignored events,
//     when [Config.Sagas] is set.
//
// # Safety
//
// Every replay and discard goes through a confirmation page that lists
// what will be done; the page itself changes nothing, and its button posts
// exactly the ids it listed.
//
// Forms are protected against cross-site request forgery twice: by
// [http.CrossOriginProtection], which refuses unsafe requests that a
// browser marks as coming from another origin (Sec-Fetch-Site, Origin),
// and by a token in every form, bound to a cookie of the browser, for
// browsers that mark nothing.
//
// Without [Config.Token] anybody who reaches the handler may use it: serve
// it on a loopback address only ([CheckBind] says whether an address is
// one). With a token every page and action needs it, from a session made
// on the login page or as "Authorization: Bearer TOKEN" (scripts; such a
// request needs no form token, as no browser sends that header by itself).
//
// # What it does not show yet
//
// The store's operators' interface ([store.Admin]) reports the outbox as a
// whole, so the overview has no per-topic backlog, no relays' leases and no
// throughput of published messages (the rates are the backlog's change
// between views); the sagas page has no list of instances by state, and
// the idempotency keys page has nothing to show.
package dashboard
