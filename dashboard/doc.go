// Package dashboard is Courier's web dashboard: an [http.Handler] built
// from a [store.Database] that shows operators the outbox and lets them act
// on what went wrong, or from many tenants' databases ([NewTenants]).
// `courier dashboard` serves it; a program can mount it in its own server
// instead.
//
// Its pages, rendered on the server with html/template and embedded in the
// binary (no JavaScript is needed):
//
//   - Overview: pending messages and the age of the oldest, leased and
//     retried rows, both kinds of dead letters, the held keys; the same per topic; the
//     relays holding leases (and leases that ended uncompleted); charts of
//     the last hour (see Trends below).
//   - Dead letters (relay side: the broker kept rejecting them) and parked
//     messages (consumer side: a consumer gave up on them), a page at a
//     time, filtered by topic, consumer and error text; one with its
//     headers, payload and history of attempts; replay and discard, one or
//     in bulk.
//   - Held keys: the keys that dead letters hold (a relay that holds its
//     topic's keys made them), a page at a time, filtered by topic and
//     error text: each with its cause, since when, and how many messages
//     wait behind it. The page of a dead letter that holds its key lists
//     the messages held behind it and says what its replay (it, then them,
//     in order) and discard (its key moves on) do to them, as the
//     confirmations do; the lists of dead letters and of a failure group's
//     members mark those that hold their key, and the group's page counts
//     them and the messages behind them; the overview counts the held keys
//     and messages. Below them, the keys consumers hold (a consumer with
//     HoldKeys made them; store.Admin.ConsumerHolds), paged apart and
//     filtered by consumer too: each with its consumer, its cause
//     (consumer:ID), since when and how many deliveries are parked behind
//     it. The page of a parked message that holds its key says so and how
//     many wait behind it; the page of a held one names its cause, linked;
//     the list of parked messages marks both; the overview and the
//     Consumers page count them.
//   - Failures: dead letters and parked messages grouped by their cause
//     (see Failure groups below), each group with its count, first and
//     last failure, topics, consumers and members; a whole group replayed,
//     discarded or exported.
//   - Delivery: each continuous audit the database keeps (courier audit
//     --watch, courier relay --audit; store.Delivery.Watches): the range
//     it has judged, its lag, passes and failed passes, its counts of
//     lost messages, phantoms, order breaks and duplicates, its latest
//     findings (newest first) with what to do about each kind
//     (audit.Advice), and whether it stopped (nothing saved for three of
//     its intervals) or its last pass failed.
//   - Scheduled messages that wait: how many, the next due time and those
//     past it that no relay has released; a page at a time, filtered by
//     topic and key, next due first; cancelled one or more at a time.
//   - Consumers with parked messages or failed runs of their handler, and
//     the keys each holds.
//   - Sagas: instances counted by type, phase and state (filtered by state),
//     those past their deadline a page at a time, and one instance's
//     timeline of transitions and ignored events when [Config.Sagas] is set.
//   - Idempotency keys: requests in flight, those whose lock expired, and
//     the keys left in flight, a page at a time.
//
// The figures come from [store.Operations] (Status, Reconcile), the dead
// letters from [store.Admin].
//
// # Failure groups
//
// Package failgroup groups a database's dead letters of both sides by a
// fingerprint of their cause: the error without what differs between
// messages failing alike (ids, numbers, sizes, quoted texts) and, for a
// parked message, its consumer, the reason it was parked and the site
// where its handler panicked. A thousand messages rejected for one reason
// are one line. The failures page lists the groups, largest first, a page
// of [Config.PageSize] at a time, filtered by side, topic, consumer and
// error text; a group's page (/failures/ID, the fingerprint courier dlq
// groups shows too) shows its cause and latest error, lists its members
// and offers its replay and discard, through the same confirmation page
// and CSRF checks as a bulk action (up to [Config.Limit] at once), and its
// export: the whole dead letters, payloads included, as JSON Lines to
// download. Each view reads the summaries of at most 10 × Config.Limit
// failures of each side (never a payload), and says so when there are
// more.
//
// A group replayed from the dashboard is remembered while the dashboard
// runs (the last 100 groups): its line and page then say how many of the
// replayed failures failed again (they are in the group again: the cause
// is still there), how many wait for their consumer to replay them, and,
// once none is left, that none failed again.
//
// # Guarded replays
//
// A replay's confirmation lists its letters by failure group, with
// counts (the dry run), and offers guards, as courier dlq replay does
// (package replayguard): a canary (replay N first, wait for their outcome,
// go on only if none failed again), a rate (replays a second), a stop on
// the first replay that fails again, and how long to wait for outcomes. A
// replay with a guard runs in the dashboard's process, after the request
// has been answered, and is recorded as it goes in the database
// (store.ReplayRuns, the table courier_replay_runs); one without is done
// at once and recorded as a run over when it started. The Replay runs page
// (/runs) lists the runs the database keeps, whichever process started
// them, a page at a time. A run whose dashboard stops stays "running",
// with the time it was last heard of.
//
// A consumer-side replay of a message parked longer ago than
// [Config.InboxRetention] (the consumers' inbox marker retention, 7 days
// by default) may apply it twice, its marker being gone: the confirmation
// names such messages and asks to tick "Replay anyway", and a replay
// posted without it is refused with 409 Conflict.
//
// # Trends
//
// The overview draws four charts over the last [Config.History] (1 hour):
// rows pending per topic, how long each topic's oldest pending row has
// waited, messages published per second, and new dead letters and parked
// messages per minute. They are inline SVG rendered on the server, each
// line a polyline with the series' name and newest value as its title (a
// tooltip), so any browser shows them and no script runs; with
// ?refresh=1 the page reloads itself every [Config.SampleEvery]
// (<meta http-equiv="refresh">).
//
// They draw readings of the overview's own query, store.Operations'
// Status, kept in memory in a ring of History/SampleEvery readings (at
// most [MaxReadings]). [Handler.Run] takes one every SampleEvery (10
// seconds; `courier dashboard` and `courier relay --dashboard` run it);
// each view of the overview takes one too, so that without Run the charts
// fill from views. A reading closer than SampleEvery/2 to the newest
// replaces it, so that a view and Run do not draw two points; but not
// once the newest stands for readings that span SampleEvery, so that
// frequent views still make a point per SampleEvery. Readings are placed
// by the database's clock (Status.Now), and are dropped when older than
// History. A reading keeps the 20 topics with the most rows pending and
// sums the others; the charts draw the 20 topics with the highest peak
// and the rest as "other topics", and a topic's line has a gap where its
// reading summed it.
//
// Rates come from the change between two readings. Published messages
// are counted from their copies, so the rate is drawn only when relays
// keep them (RelayConfig.KeepPublished, courier relay --keep-published)
// and the count is exact (at most store.CountLimit copies); a count that
// dropped (cleanup trimmed copies) leaves a gap, not a negative rate.
// Dead letters and parked messages per minute are net increases, never
// below 0: a replay or a discard in the same interval hides as many new
// ones. The readings live in the process: a restart starts them again.
//
// # Many tenants
//
// [NewTenants] builds the dashboard of many tenants, each with a database
// of its own (package tenant's tenants, or any others): from
// [TenantsConfig.List], a function that returns the tenants' names, and
// [TenantsConfig.Open], one that opens a tenant's database. It serves the
// tenant list at its root: a page of [Config.PageSize] tenants, filtered
// by name, each with its pending messages, the age of the oldest, its dead
// letters and parked messages, or the error reading them, read
// [TenantsConfig.Reads] (4) tenants at a time and each within 10 seconds.
// Under /t/NAME/ it serves the tenant's pages, the very pages and actions
// of the dashboard of one database; their header names the tenant. A
// name, like every path segment the dashboard makes from data (a saga's
// type and id, a failure group's id), is written in URLs as
// url.PathEscape writes it, or as '~' and the name in base64url when it
// is "." or ".." (steps of a path to a browser) or starts with '~'; every
// name is escaped where a page shows it, so that a name read from a file
// or a catalogue cannot break a page or a link. A name List does not return is
// answered 404, pointing to the tenant list; a tenant whose database
// cannot be opened shows the error on its line of the list and on its
// pages (503), and the others are served all the same. A tenant's charts
// hold the readings of the views of its overview only: no reading is
// taken in the background, which would keep every tenant's database
// open, and they are dropped when its database is closed.
//
// A tenant's database is opened when a request needs it, and at most
// [TenantsConfig.MaxOpen] (8) are open at once: to open another, the
// dashboard closes the one used least recently among those no request is
// using, or waits for one to be done with. The tenant list's reads count
// as no use, so that the databases they open are closed first. A tenant
// List stops naming has its database closed. Open is not called again
// while a tenant's database stays open, so a tenant moved to another
// database is shown there once its old one was closed. [Tenants.Close]
// closes them all.
//
// The login, the style sheet and the cookies are the dashboard's, at its
// root: one login (or the bearer token) covers every tenant, and logging
// out ends it for all of them. Every request, a tenant's included, passes
// the checks below before its tenant is looked at.
//
// # Safety
//
// Every replay and discard goes through a confirmation page that lists
// what will be done; the page itself changes nothing, and its button posts
// exactly the ids it listed.
//
// A request is served only when its Host header names localhost, a
// loopback address, the address the request came to or one of
// [Config.AllowedHosts]; any other gets 421 Misdirected Request before any
// handler runs. That closes DNS rebinding: a web page whose name its owner
// made resolve to 127.0.0.1 is same-origin with the dashboard in the
// browser's eyes, but its requests name that page's host.
//
// Forms are protected against cross-site request forgery twice: by
// [http.CrossOriginProtection], which refuses unsafe requests that a
// browser marks as coming from another origin (Sec-Fetch-Site, Origin),
// and by a token in every form, bound to a cookie of the browser, for
// browsers that mark nothing; an unsafe request whose Referer names
// another host is refused too. After logging in and after an action the
// browser is sent back only to a path of the dashboard.
//
// Without [Config.Token] anybody who reaches the handler may use it: serve
// it on a loopback address only ([CheckBind] says whether an address is
// one). With a token (at least [MinTokenBytes] long, see [CheckToken])
// every page and action needs it, from a session made on the login page or
// as "Authorization: Bearer TOKEN" (scripts; such a request needs no form
// token, as no browser sends that header by itself). A session is a random
// id kept in memory: it ends when its browser logs out, when any browser
// logs out everywhere, after [Config.SessionTTL], and when the process
// stops, so a new token (a new Handler) ends every session.
//
// The token is checked before a request's body is read; a body is read
// only as a URL-encoded form of at most [MaxFormBytes]. [NewServer] gives
// a server the timeouts that keep slow clients from holding connections.
//
// # Limits
//
// The store counts saga instances by state but does not list them, so the
// sagas page lists only overdue instances; another instance's timeline is
// found by its type and id. Published messages are counted only when relays
// keep copies of them (RelayConfig.KeepPublished, courier relay
// --keep-published); otherwise the published chart stays empty and says
// so. Lists of dead letters read the summaries of one
// page ([Config.PageSize], store.Admin's ListDeadLetters and ListParked),
// never a payload; a replay or discard of all that match a filter selects
// at most [Config.Limit], and a replay, discard or cancel request that
// names more ids than that (at most [MaxActionIDs]) is refused with 400
// before any is acted on. The overdue sagas and the stale keys are listed
// a page of [Config.PageSize] at a time too, but Reconcile, where they come
// from, has no cursor: page N reads the N pages up to it (the sagas page
// filtered by state reads them all, then pages what the filter keeps), so
// the pages show the 1,000 oldest at most and say when there are more
// (courier reconcile --json lists them with a larger --limit). Each view
// of the overview, consumers, sagas and keys pages runs Status (the last
// two Reconcile too), and so does Run every SampleEvery: bounded queries
// (see docs/operations.md), but not free on a large database, which is
// why pages refresh by themselves only when asked (the overview's
// ?refresh=1, every SampleEvery) and SampleEvery's default is 10 seconds.
package dashboard
