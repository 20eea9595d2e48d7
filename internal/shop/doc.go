// Package shop is Courier's reference system: a small online shop of four
// services that share nothing but a message broker, built the way the
// pattern says an application should use Courier, and run under faults to
// show that the guarantees hold.
//
// # The services
//
//   - orders takes orders over HTTP (POST /orders with an Idempotency-Key,
//     kept per client's Authorization; GET /orders/{id}) and runs one saga per order: charge the payment,
//     reserve the stock, prepare the shipment. It is the orchestrator: every
//     reply comes back to it, and a step that fails or times out is
//     compensated with the steps before it (refund, release, cancel).
//   - payment charges and refunds. It reads both versions of
//     ChargeRequested (see Evolving an event below).
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
//     and starts it again on the same database; [Shop.Deploy] does the
//     same with another build of it (Config.ChargeVersion).
//   - [RunDemo] is what courier demo runs (over the transport --broker
//     names): the shop, a [Load] of orders
//     placed through the HTTP API with [Faults] injected (declined
//     payments, missing stock, failed handlers and shipments, duplicated and
//     reordered deliveries, replayed requests, a crash), a deploy of
//     ChargeRequested's version 2 in the middle of it (DemoConfig.Deploy),
//     then an [Audit] of the four databases.
//   - [NewOrders], [NewPayment], [NewInventory] and [NewShipping] run one
//     service each, as courier shop SERVICE does in a process of its own.
//
// # Transports
//
// The services share nothing but a [Transport], which makes each
// incarnation's Publisher (for its relay) and Subscriber (for its inbox
// consumer) and sets up and tears down what the broker needs:
//
//   - [NATSTransport], the default: one JetStream stream, a durable
//     consumer per service. courier demo runs a server in its process, or
//     uses --broker-url nats://….
//   - [KafkaTransport]: a topic per shop topic, records keyed by order id
//     (Kafka keeps a key's records in order on one partition), a consumer
//     group per service. courier demo --broker kafka runs franz-go's kfake
//     cluster in its process, or uses --broker-url kafka://….
//   - [AMQPTransport]: one topic exchange, a quorum queue per service with
//     a single active consumer, so that a restarted service takes over from
//     its previous incarnation instead of consuming next to it. courier
//     demo --broker amqp uses amqp://guest:guest@127.0.0.1:5672/ or
//     --broker-url amqp://….
//   - [WebhookTransport]: each service serves a webhook endpoint (a
//     broker/webhook Handler) on a loopback port of its own, and the relays
//     POST every message to the endpoints of the services that consume its
//     topic ([Consumers]), signed with the endpoint's own whsec_ secret;
//     each endpoint takes only the topics its service consumes. Its inbox
//     consumers retry in place (KeepOrder), since a retry answered through
//     HTTP would hold back every message to the endpoint. courier demo
//     --broker webhook.
//
// None of the shop's invariants rests on the broker ordering a key's
// messages: the saga ignores replies that come late, twice or out of order,
// and the chaos decorator reorders deliveries on purpose.
//
// # Evolving an event
//
// [ChargeRequested] has two versions: version 1 ([ChargeRequestedV1]) gave
// the amount in cents of the shop's [Currency] without naming it; version 2
// gives a [Money], value and currency. Config.ChargeVersion says which
// build a service runs: the orders service writes its version, payment
// built with version 2 turns version 1 into version 2 with an upcaster and
// has one handler of version 2, and payment built with version 1 charges
// version 1 and meets version 2 as newer than it knows
// (courier.ErrNewerVersion): its inbox retries such a request without
// counting the runs for Config.NewerVersionWait, then parks it as
// newer_version, to be replayed once payment is deployed.
//
// The demo starts with version 1 everywhere and, once a third of the orders
// are placed, deploys version 2 in the order DemoConfig.Deploy names, with
// version 1 requests still in flight at the switch: consumer first
// (payment, stopped while requests wait for it, then orders), or producer
// first (orders, while payment is stopped and requests wait for it; payment
// comes back with version 1 and receives version 2 requests, which wait
// for its deploy; with DemoConfig.DeployLate they wait past
// NewerVersionWait and are parked, and the demo replays them after the
// deploy as an operator would). The report counts each version applied,
// those that waited, were parked and replayed ([ChargeStats]), and the
// audit checks that each order's request was answered once.
//
// # What the audit checks
//
// [AuditShop] reads the four databases directly, as an auditor would, and
// checks the invariants the promises of Courier add up to: one order per
// Idempotency-Key, no double charge, every charge request answered once
// (whatever its version, none left parked), every refund matching a
// charge, stock conserved, no saga stuck, shipments only for completed
// orders, and effects that match each order's outcome.
package shop
