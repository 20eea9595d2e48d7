// Package polyglot runs the outbox's clients in other languages end to
// end: a writer program in another language commits business rows and
// messages in its own transactions, the Go relay publishes the messages to
// NATS, and a Go inbox consumer applies them. The harness (harness_test.go)
// checks that the ids, topics, keys, types, versions, content types,
// headers, payloads and occurrence times that arrive are the ones written,
// that each key's messages arrive in the order they were written, that
// scheduled messages arrive once due, and that a rolled-back transaction
// left neither its business row nor its messages. It runs on SQLite always,
// and on PostgreSQL and MariaDB when their COURIER_TEST_* variables are set.
//
// # The plan
//
// A writer program reads one JSON object, the plan, on its standard input:
//
//	{"dialect": "postgres" | "mysql" | "sqlite",
//	 "database": DATABASE,
//	 "transactions": [TX, …]}
//
// DATABASE says where to connect, by dialect:
//
//	postgres: {"url": "postgres://user@host:port/db?sslmode=disable", "schema": "t_…"}
//	          connect to url, then SET search_path TO schema (it holds
//	          Courier's tables and polyglot_orders)
//	mysql:    {"url": "mysql://user[:password]@host:port/db"}
//	sqlite:   {"path": "/…/outbox.db"}
//
// TX is one transaction, carried out in plan order, one after the other:
//
//	{"order": {"id": "order-1", "note": "text"},
//	 "commit": true | false,
//	 "due": DUE,          // absent: write the messages; present: schedule them
//	 "messages": [M, …]}
//
// The program begins a transaction, inserts the business row
// (INSERT INTO polyglot_orders (id, note) VALUES (order.id, order.note)),
// writes all of messages with one call of its client's write (or, with
// due, schedule), then commits when commit is true and rolls back
// otherwise. DUE is {"after_ms": N} (due N milliseconds after the schedule
// call, the client's relative due time) or {"at": "RFC 3339 time"}.
//
// M is a message as the program builds it with its client: "topic", "key"
// and "type" are required; the payload is exactly one of "payload_base64"
// (bytes), "payload_text" (a string, which the client sends as its UTF-8
// bytes) or "payload_json" (any JSON value, which the client encodes as
// JSON with content type application/json); "id", "version",
// "content_type", "headers" (an object of strings) and "occurred_at"
// (RFC 3339) are optional: when absent, the client's defaults apply.
//
// # The output
//
// After each transaction ends, the program prints one line of JSON per
// message of it, in plan order, to its standard output:
//
//	{"tx": 0, "committed": true,
//	 "message": {"id": "…", "topic": "…", "key": "…", "type": "…", "version": 1,
//	             "content_type": "…", "payload_base64": "…",
//	             "headers": {…},      // absent when the message has none
//	             "occurred_at": "2026-01-02T03:04:05.123456Z"}}
//
// where tx is the transaction's index in the plan and message is the
// message as the client built and wrote it (its id and every default
// filled in, occurred_at in UTC with microseconds). It exits 0 when it
// carried out the whole plan; on any error it prints the error to its
// standard error and exits non-zero. It prints nothing else to standard
// output.
//
// A language joins by adding a file with a Test function that calls
// forEachDialect with a [writer] whose command runs its program.
package polyglot
