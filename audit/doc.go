// Package audit compares what a database says was published with what the
// broker holds, over a window of time, and reports what does not match:
// messages lost by the broker, phantoms, duplicates and keys out of order.
// `courier audit` prints its [Report]; the failover tests count with it.
//
// # What is compared
//
// The database side is the copies of published messages that relays keep
// with KeepPublished (courier_outbox_published): each says that the
// broker acknowledged the message, and when the relay recorded it. The
// broker side is what a [broker.Reader] reads back without consuming it:
// a NATS JetStream stream (limits retention) or Kafka topics. RabbitMQ
// queues and webhook endpoints keep no copy Courier could read, and cannot
// be audited.
//
// A message is published near the time its copy records, but not exactly
// then: the broker stores it before the relay records the acknowledgement,
// and the two clocks differ. So each side is read Config.Slack beyond the
// window, and a message is judged only by what was stored or recorded
// within it. The window narrows by itself when a side cannot cover it:
// when the database keeps no copy from before the window (copies trimmed
// by `courier cleanup`, or KeepPublished turned on later), it starts at
// the first copy kept; when the broker's limits removed messages stored
// in the window, it starts a Slack after the oldest one it holds. The
// report says so ([Report.Narrowed]).
//
// # The findings, and what an operator does with each
//
//   - Lost: the database holds a copy (the broker acknowledged it) that the
//     broker does not hold. The broker lost an acknowledged message: a
//     stream stored in memory or without replicas, a server that
//     acknowledged before its disk had it (NATS's sync_interval), a purge
//     or a retention limit shorter than the window. Consumers never saw it.
//     Publish it again from the copy (its id lets the consumers' inboxes
//     drop it where it did arrive after all), and fix the broker's
//     durability settings.
//   - Phantom: the broker holds a Courier message that the database does
//     not know at all: not pending, not a published copy, not a dead
//     letter. After an asynchronous database failover this is a message
//     whose transaction the new primary never received: consumers acted on
//     an event whose business row no longer exists. Find its effects by its
//     id in the consumers' inboxes and undo or reconcile them; run the
//     database with synchronous replication to have none. A phantom is also
//     what a copy trimmed after the window's start looks like (cleanup
//     kept published copies for less time than the broker keeps messages),
//     or a message another program published with Courier's headers.
//   - Duplicate: the broker holds a message (one id) more than once. A relay
//     that crashed between the broker's acknowledgement and its record
//     publishes the message again; NATS drops such a copy within its
//     stream's duplicate window, Kafka does not. Consumers' inboxes apply a
//     message once, so this is expected now and then; many of them mean
//     relays crash or lose their leases often.
//   - Order break: a key's messages are in the broker's log in an order
//     other than the database's (outbox ids): its consumers saw a later
//     event before an earlier one. Courier's relays never publish a key's
//     message before an earlier one was acknowledged, so this points at a
//     republished message (a dead letter replayed after later messages of
//     its key, a copy published again by hand), a Kafka topic whose
//     partitions were added (the key moved), or another publisher.
//
// [Advice] says the same in a few sentences per kind, for the places that
// show findings (`courier status`, the dashboard's Delivery page).
//
// Also counted, not alarms: messages on the broker that are still pending
// in the outbox (a relay published them and has not recorded it yet, or
// crashed before it did: they will be published again, a duplicate), those
// that are dead letters (the broker took a message whose failure the relay
// counted, as after a timeout), and messages that are not Courier's (no
// message id).
//
// # Watching continuously
//
// A [Watcher] audits over and over (`courier audit --watch`, or
// `courier relay --audit` inside a relay): every WatchConfig.Interval a
// pass reads what both sides gained since the last pass, and Slack more
// (the copies recorded, the messages stored), and judges what was
// published from where the last pass stopped to Slack ago. Each message is
// judged once, by one pass, so each finding is logged once; a fault is
// found by the first pass after it is Slack old, within two passes of it.
// The watch remembers the message ids and each key's last message for
// WatchConfig.Remember, so a copy stored again or a key's message stored
// after a later one is found however many passes apart they came. Its
// state (the range judged, the passes, what it found) goes to an
// observer (metrics.Collector.Audit: the courier_audit_ metrics), to the
// database (WatchConfig.Save: `courier status`, the dashboard's Delivery
// page) and to /readyz ([Watcher.Ready]).
//
// A watch checks that the broker stored each message the database says
// was published, when it read it: a message the broker drops after a pass
// has read it (a purge, a retention limit, a disk lost later) is found by
// a one-shot audit ([Run]) of that window, not by the watch.
//
// Its cost: each pass reads the database's copies and the broker's
// messages of its Interval plus Slack (each message is read about
// 1 + Slack/Interval times; 1.33 with the defaults), one PublishedBetween
// query per pass, and a Locate for the broker's messages the copies do not
// hold (rare; it scans every copy kept). On PostgreSQL the query reads
// its window through a BRIN index, which reads every block range not yet
// summarized whole: Courier turns on the index's autosummarize, so that
// autovacuum summarizes each range as it fills and a pass reads its window
// and the range being filled; where autovacuum is off, every pass reads
// all the copies added since the last VACUUM. It holds the ids and keys of
// the last Remember in memory: some 350 bytes a message, 210 MB for 10
// minutes at 1,000 messages a second. bench/RESULTS.md has the measured
// figures.
//
// # Cost of a one-shot audit
//
// Run keeps the window's copies and message ids in memory (some 200 bytes
// a message): audit an hour of a million messages an hour rather than a
// week of them. It reads the copies with one query sorted by id, and the
// broker from the window's start; ids it cannot place otherwise are looked
// up with [store.Operations.Locate], which scans the published copies once
// per 1,000 ids.
package audit
