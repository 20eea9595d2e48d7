// Package relay moves committed outbox messages to a broker: it claims a
// batch of due rows with a short lease, publishes them and waits for the
// broker's acknowledgements, then marks the acknowledged rows published in one
// statement. A row is never marked before the broker acknowledged it, so a
// crash at any point loses nothing: the lease expires and another relay (or
// the same one, restarted) publishes the row again. The broker sees a
// duplicate at most, which JetStream drops by message id.
//
// # Ordering
//
// This is Courier's per-key order contract; the rest of the documentation
// refers to it.
//
// Messages with the same key are published in the order they were written,
// provided the transactions that write the key are serialised: each one
// commits before the next one writes its first message of the key. Within one
// transaction they are published in the order of the Write calls, and of the
// messages within a call. Applications get that serialisation from what they
// already do to keep an aggregate consistent: lock the aggregate's row
// (SELECT … FOR UPDATE, or an UPDATE first) or save it with a version check,
// as package saga does with its instances. On SQLite, which runs one write
// transaction at a time, every writer is serialised.
//
// On PostgreSQL this holds for a transaction that stays open after writing
// a key's message, too, for up to 30 seconds: the store's claims scan from a
// floor that does not pass the rows of transactions still open (see
// store/postgres, Claiming). A transaction that writes and stays open for
// longer than that, anywhere on the server, stops holding the floor (so
// that claims do not scan every row published meanwhile); a key's message
// it commits after that can be published after the key's next transaction
// (it is found by the next full pass, never lost). Keep a transaction that
// writes ordered messages short, or write its messages last, just before
// its commit.
//
// Transactions that write the same key concurrently, without such
// serialisation, are published in the order their rows become visible to a
// claim, roughly commit order, which can differ from the order of their ids.
// A row's id (store.Record.Seq) is allocated when it is inserted, not when it
// commits: if T1 inserts id 10 and commits late, while T2 inserts id 11 and
// commits early, a claim in between sees only 11 and publishes it; 10 follows
// once committed, after 11. Neither is lost, and no message is published
// ahead of an earlier row of its key that had committed when it was
// claimed. Events whose order matters must therefore come from serialised
// writers.
//
// A message that becomes a dead letter either leaves the order or holds
// its key, as Config.HoldKeys says of its topic:
//
//   - By default it leaves the order: its key moves on. Replaying it
//     (store.Admin) puts it back in its original place among its key's
//     pending rows, so it is published after what its key published
//     meanwhile and before what is still pending.
//   - On a topic of HoldKeys it holds its key (store.Failure.Hold): no
//     later message of its key, of any topic, is published while it is a
//     dead letter. Claims leave the key alone and move its rows out of
//     courier_outbox, behind it, to courier_outbox_held, so that a held
//     key's backlog takes no room in a claim; other keys flow. Replaying
//     it puts it back into the outbox, then the messages held behind it,
//     then its key's rows still pending, with new ids in that order: they
//     are published in that order, and the key is free again. Discarding
//     it puts back the held messages, then the pending ones, the same
//     way: the key moves on without it. courier status and courier dlq
//     show the held keys, and package metrics' Collector the gauges
//     courier_outbox_held_keys, courier_outbox_held_messages and
//     courier_outbox_oldest_hold_age_seconds (alert on the last: a held
//     key waits for an operator). A topic of HoldKeys is published one
//     message of a key per round trip, even to a broker that keeps a
//     key's order when several are in flight (broker.OrderKeeper): such a
//     broker stores the messages sent after one it refuses for good.
//
// A scheduled message (outbox.Writer.Schedule) is not in the outbox while
// it waits, so it holds nothing back: its key's other messages, written
// before or after it, go out as if it did not exist, and a relay's claims
// never see it. When it falls due a relay releases it (store.Releaser):
// moves it into the outbox as a message of its key written at that moment.
// It is then published after every message of its key committed before its
// release and before those committed after, and from then on this contract
// holds for it as for any other. Releases take turns and move due messages
// in the order of their due times, and of their scheduling for equal due
// times, so a key's scheduled messages are published in due order among
// themselves. A relay releases a message at or after its due time by the
// database's clock, never before, and within milliseconds of it while a
// relay runs; when no relay ran at that time, the messages that fell due
// meanwhile are released when one starts, behind what their keys wrote
// during the outage. A cancel (outbox.Writer.Cancel) that commits before
// the release removes the message; a release passes over a message whose
// cancel has not committed yet, and if that cancel rolls back, the next
// release moves it, behind any message of its key released meanwhile.
//
// The CDC relay (package relay/cdc) keeps this contract in every case, with
// commit order, which the log gives, where the polling relay has the order
// rows become visible, and through kills, restarts and standby takeovers
// alike: what it publishes again after one is a duplicate of what it had
// published. One case differs: a replayed dead letter is published after
// every message of its key committed before the replay, pending ones
// included, since the log brings it at its replay's commit.
//
// For the polling relay, three rules give that order, even with several
// relays and retries:
//
//  1. A claim takes a key's committed rows in id order, and none of them
//     while another row of the key is leased or waiting for a retry (the
//     store enforces this, see store.RelayStore).
//  2. Within a batch, the rows of one key are published one after another:
//     each round sends the next message of every key at once, so a batch
//     spread over many keys is one round, and a burst on one key is published
//     at the speed of a broker round trip per message, still claimed and
//     marked a whole batch at a time. A broker that keeps a key's order
//     when several of its messages are in flight (broker.OrderKeeper: Kafka,
//     whose idempotent producer keeps a partition's order; NATS JetStream
//     2.12 and later on streams that allow atomic batches) gets each key's
//     run of messages to one topic in one round instead, without waiting
//     for each acknowledgement: a burst on one key then goes at the speed
//     of many keys. The webhook publisher takes a key's run in one round
//     too, and sends it stop-and-wait itself, as HTTP needs.
//  3. When a message fails, the later messages of its key in the batch are not
//     sent (or, pipelined, the broker stores none of them); they are
//     released, and rule 1 holds them back until the failed message is
//     published or becomes a dead letter. A message the broker rejects for
//     good is a dead letter at once and does not hold its key: the rest of
//     the key's run goes on in the same batch. Other keys never wait.
//
// # Failures
//
// A failed publish counts as an attempt unless the broker itself was at fault
// (broker.ErrUnavailable: unreachable, timed out, not ready). A broker that
// answers and refuses the message counts against it, whether the message is
// the problem (too large, invalid) or its destination is (a subject no stream
// binds: see broker/nats.ErrNoStream).
//
// A refusal the broker makes for good (broker.ErrRejected: the message is
// larger than the server's max_payload or its stream's max_msg_size, its
// subject or headers are invalid) makes the message a dead letter at once:
// retrying cannot change the answer, and would only hold its key back. The
// dead letter's last error is the broker's reason with the fix; its history
// holds that one attempt, counted. Replay it once the limit is raised.
//
// Other counted failures may pass later (an operator binds a stream to the
// subject): they are retried after a capped exponential backoff with jitter,
// and after MaxAttempts the message becomes a dead letter with its error
// history (each attempt marked counted or not). Either way its key then
// moves on, unless its topic holds keys (Config.HoldKeys; see Ordering).
// Uncounted failures are retried without limit: an outage never
// produces dead letters, it produces a backlog that drains when the broker
// returns. While every publish of a batch fails that way, the relay logs
// that the broker is unavailable and pauses claiming for the same backoff; a
// counted failure never pauses it, so one bad subject slows no other key.
// A broker that says how long to wait (an HTTP endpoint's Retry-After, an
// open circuit breaker's remaining time: broker.RetryAfterError) is
// believed, within Backoff.Max: an outage's retry and the relay's pause
// take the broker's wait instead of the backoff (which grows through a
// long outage, while an endpoint that says it is back in 5s is), and a
// counted failure waits at least as long as asked.
//
// # Isolation
//
// A stuck key costs other keys nothing, and a stuck relay costs other relays
// nothing but its own leased rows:
//
//   - A held key's backlog (a poison message with thousands of rows of its
//     key behind it, the first batch of a large transaction on one key being
//     published) hides no other key's rows: a claim skips held keys' rows as
//     it meets them, looking at up to max(25×BatchSize, 25,000) free rows
//     (store/internal/claims). A message whose retry has come due is
//     claimed alone, without the rows of its key behind it, so a poison
//     message's retries do not read and hand back its backlog each time.
//   - A relay frozen at any point of its claim (SIGSTOP, a paused VM, a host
//     gone silent) keeps the rows it leased until its lease ends and holds no
//     lock the others wait for: on PostgreSQL a claim is one server-side call
//     whose answer fits in the socket's buffers; on MySQL claims take turns
//     through a lease of a few seconds; on SQLite a claim holds the write
//     lock only for the few statements that record its lease (a process
//     frozen inside one of them stops every writer of the file, see
//     store/sqlite).
//   - A subject no stream binds is refused at once and counted (see
//     Failures), so it neither pauses the relay nor holds up its batch.
//   - On PostgreSQL, rows deleted after publishing that vacuum cannot remove
//     yet (a long transaction is open somewhere) do not slow claims down: a
//     claim scans from a floor below which nothing is pending (see
//     store/postgres).
//
// A key's messages within one batch are published one after another (rule
// 2), and the batch's lease ends when its last key is done, so a key with a
// slow broker acknowledgement (up to the publisher's ack timeout) delays
// the next claim of the other keys of its batch by as much.
//
// # Wake-ups
//
// A relay that finds work keeps polling while it stays busy, starting at 1ms
// and doubling while claims come back empty, so a steady stream is picked up
// within a millisecond or two and writers pay nothing. After a few empty polls
// (8ms) it arms its store.Notifier and waits for a signal: the first commit
// after that wakes it within milliseconds, and an idle relay costs the
// database one claim per PollInterval. Without a notifier, or while it is
// disconnected, polling backs off to PollInterval. See
// store/postgres.Notifier for how the signal avoids serialising writers.
//
// # Watching a relay
//
// Run does not return when the database or the broker fails: it logs the
// error (Config.Logger) and retries for as long as it takes, since the
// outbox loses nothing meanwhile. A program that embeds a relay must watch
// it rather than wait for Run to fail:
//
//   - Relay.State, from any goroutine, as often as needed: whether Run is
//     running, when the last claim succeeded, whether claims are failing
//     (how many in a row, since when, the last error: the database), whether
//     the broker is held down (since when, how many batches in a row, the
//     error; claiming pauses meanwhile), whether recording batch outcomes is
//     failing, and the Metrics totals. It encodes to JSON as it is.
//   - State.Check(grace) for a verdict: unhealthy when the relay is not
//     running, or when its claims, the broker or its completions have been
//     failing for longer than grace. A grace of a minute or so rides out a
//     database failover or a broker restart; choose it shorter than the
//     delay your consumers tolerate. Serve it as a health check, alert on
//     it, or restart the process when it stays unhealthy.
//   - Metrics, as rates: Published should rise while there is work;
//     DeadLettered rising means messages are being parked (courier dlq,
//     store.Admin), which Check does not count as unhealthy; Retried rising
//     while the broker is not down means messages failing one by one.
//   - The outbox (store.RelayStore.Stats, courier status), shared by every
//     relay on the database: Pending, OldestPendingAge and DeadLetters,
//     and with HoldKeys, HeldKeys, Held and OldestHold. A
//     growing OldestPendingAge is the end-to-end alarm: messages are not
//     getting out, whichever relay is at fault.
//
// The relay learns about the broker only from its own publishes: an idle
// relay reports no outage, and BrokerDown clears with its first publish that
// succeeds. Watch the broker connection (nats.Conn.Status) to know sooner. A
// claim that the database has not answered within LeaseDuration fails, so a
// database gone silent shows as failing claims like one that refuses
// connections.
//
// # Tracing
//
// Each call to the broker is a send span (kind producer, named "send" and
// the topic when its messages share one) with a link to the trace context
// each message carries in its traceparent header: the context of the
// request that wrote it (package outbox records it). The span has the
// messaging conventions' attributes: messaging.system (its MessagingSystem
// method's, or the System of the broker kind its package registered; see
// package broker/brokerkind), messaging.operation.type "send",
// messaging.destination.name for one topic, messaging.message.id for one
// message and messaging.batch.message_count for several. It is an error
// span when a message failed. The relay does not change the messages'
// headers: consumers link to the writer's context, not to the send span.
// Config.TracerProvider chooses the provider; with none installed a call
// costs a non-recording span, a handful of allocations. A recorded span
// links once per distinct trace context in the call (the messages of one
// transaction share one), at a cost of about a microsecond each
// (BenchmarkInstrumentedPublish, in relay/internal/dispatch); sample the
// send spans if batches of thousands of requests' messages make that
// matter. A span keeps at most
// the SDK's link limit (128 by default, sdktrace.SpanLimits).
//
// Config.Observer receives the same events for metrics: package metrics
// turns them into Prometheus counters and histograms, and package health
// serves State.Check as a readiness endpoint.
//
// # Testing
//
// Package store/memstore is an outbox in memory with the stores' semantics
// and a clock a test moves forward (leases expire and retries fall due
// without sleeping), and package broker/memory a publisher in memory that
// fails, rejects or holds messages on demand. A relay runs on them in
// milliseconds, which suits unit tests of a program's wiring and of its
// reactions to failures; the tests that count remain those on the
// database and the broker the program runs on.
//
// # Shutdown
//
// When Run's context ends the relay stops claiming, finishes the publishing
// round in progress, records every outcome and releases the rows it did not
// get to, so another relay can take them at once; ShutdownTimeout bounds all
// of that. A relay killed outright loses nothing either: its leases expire
// after LeaseDuration.
package relay
