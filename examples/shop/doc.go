// Package shop is Courier's reference system: a small online shop of four
// services that share nothing but a message broker, built the way the
// pattern says an application should use Courier, and run under faults to
// show that the guarantees hold.
//
// # The services
//
//   - orders takes orders over HTTP (POST /orders with an Idempotency-Key,
//     GET /orders/{id}) and runs one saga per order: charge the payment,
//     reserve the stock, prepare the shipment. It is the orchestrator: every
//     reply comes back to it, and a step that fails or times out is
//     compensated with the steps before it (refund, release, cancel).
//   - payment charges and refunds.
//   - inventory reserves and releases stock.
//   - shipping prepares and cancels shipments. A prepared shipment waits in
//     the warehouse until the carrier collects it, after the saga has
//     completed; until then cancelling it undoes it completely, which is why
//     the last step of the saga has a compensation too.
//
// Each service has a database of its own (a SQLite file, a PostgreSQL schema
// or a MySQL database, opened through store/dburl: the services contain no
// dialect-specific code besides the column types of their tables) holding
// its business tables, its outbox, its inbox and, for orders, the sagas and
// the Idempotency-Key records. A service changes its tables and writes the
// messages that announce the change in one transaction; its relay publishes
// them; the receiving service applies each message once, its inbox marker
// and its effects committed together. The topics (TopicOrders, …) and the
// message types (ChargeRequested, PaymentSucceeded, …) are the services'
// only contract: the type names travel on the wire, which is why they are
// exported.
//
// # Running it
//
//   - [Start] runs the four services in one process, each on its own
//     database, talking only through the broker; [Shop.Restart] crashes one
//     and starts it again on the same database.
//   - [RunDemo] is what courier demo runs: the shop, a [Load] of orders
//     placed through the HTTP API with [Faults] injected (declined
//     payments, missing stock, failed handlers and shipments, duplicated and
//     reordered deliveries, replayed requests, a crash), then an [Audit] of
//     the four databases.
//   - [NewOrders], [NewPayment], [NewInventory] and [NewShipping] run one
//     service each, as courier shop SERVICE does in a process of its own.
//
// # What the audit checks
//
// [AuditShop] reads the four databases directly, as an auditor would, and
// checks the invariants the promises of Courier add up to: one order per
// Idempotency-Key, no double charge, every refund matching a charge, stock
// conserved, no saga stuck, shipments only for completed orders, and
// effects that match each order's outcome.
package shop
