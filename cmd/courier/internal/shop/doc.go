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
// # Instances
//
// A service runs as several instances at once ([Service.Instance]), as a
// service runs as several processes: two in the demo (DefaultInstances).
// Each instance has its own relay and its own inbox consumer and, for
// orders, its own HTTP API and saga deadlines; all of them work on the
// service's one database, so they share its outbox (two relays on one
// outbox take turns by lease: a message is claimed by one of them at a
// time, and a key's next message only once its previous one is
// published), its inbox (a message is applied once, whichever instance
// receives it, and a delivery that an instance is still applying makes
// another wait for its transaction) and its sagas (a transition that
// loses to another instance's is retried). They consume the service's
// topic as one consumer: a message goes to one of them, and the
// [Transport] decides how they share the messages (see Transports). The
// shop's load balancer spreads the orders API's requests over the orders
// instances, round robin ([Shop.URL]).
//
// Where the transport shares the keys among the instances, each key going
// to one instance at a time and moving as they come and go
// (broker.KeySharer), their inbox consumers keep each key's order
// (inbox.ConsumerConfig.KeepOrder), so a key's messages are applied in
// order across the instances. The saga does not need it; see newConsumer
// for why the shop keeps it all the same.
//
// # Running it
//
//   - [Start] runs the four services in one process, each as two
//     instances on its own database, talking only through the broker;
//     [Shop.Restart] crashes one instance of a service and starts it again
//     on the same database while the other goes on; [Shop.Deploy] stops
//     every instance of a service and starts them again with another
//     build of it (Config.ChargeVersion).
//   - [RunDemo] is what courier demo runs (over the transport --broker
//     names): the shop, a [Load] of orders
//     placed through the HTTP API with [Faults] injected (declined
//     payments, missing stock, failed handlers and shipments, duplicated and
//     reordered deliveries, replayed requests, a crash of an instance), a
//     deploy of ChargeRequested's version 2 in the middle of it
//     (DemoConfig.Deploy), then an [Audit] of the four databases. The
//     report says how the instances shared the messages and what each
//     applied.
//   - [NewOrders], [NewPayment], [NewInventory] and [NewShipping] make one
//     service each; courier shop SERVICE runs one instance of it as a
//     process of its own, and several such processes of one service share
//     its keys with --partitions (the transports' Partitions).
//
// # Transports
//
// The services share nothing but a [Transport], which makes each
// instance's Publisher (for its relay) and Subscriber (for its inbox
// consumer) and sets up and tears down what the broker needs. The
// in-process shop runs each service as two instances on every transport:
//
//   - [NATSTransport], the default: one JetStream stream, each message's
//     key the last token of its subject (broker/nats Config.KeySubjects).
//     With Partitions (8 in the demo), the instances of a service share its
//     keys over a work-queue stream made for its consumer (broker/nats
//     PartitionStream, Courier's, sourced from the shop's stream), each
//     partition consumed by one instance at a time. That needs nats-server
//     2.10 or later: the demo's embedded server qualifies; on an older
//     one (--broker-url to a 2.9 server) the instances share the service's
//     durable consumer instead, the messages split between them and a
//     key's order not kept across them, which the saga does not need, and
//     the report says so. courier demo runs a server in its process, or
//     uses --broker-url nats://….
//   - [KafkaTransport]: a topic per shop topic, records keyed by order id
//     (Kafka keeps a key's records in order on one partition), a consumer
//     group per service, whose members, the instances, share its topic's
//     partitions. courier demo --broker kafka runs franz-go's kfake cluster
//     in its process, or uses --broker-url kafka://….
//   - [AMQPTransport]: one topic exchange and, with Partitions (8 in the
//     demo), a consistent-hash exchange per service spreading its messages
//     by key over that many quorum queues with a single active consumer,
//     which the instances share (they find one another on a fanout
//     exchange, ".members"); it needs RabbitMQ's consistent-hash plugin.
//     Without Partitions, a quorum queue per service with a single active
//     consumer: one instance consumes, the other stands by. courier demo
//     --broker amqp uses amqp://guest:guest@127.0.0.1:5672/ or
//     --broker-url amqp://….
//   - [WebhookTransport]: each service has a webhook endpoint on a loopback
//     port of its own, and the relays POST every message to the endpoints
//     of the services that consume its topic ([Consumers]), signed with
//     the endpoint's own whsec_ secret; each endpoint takes only the topics
//     its service consumes. The endpoint is a load balancer of the shop's
//     own (a reverse proxy) in front of the service's instances, each
//     serving a broker/webhook Handler on a port of its own, and it spreads
//     the requests over them round robin. Its inbox consumers retry in
//     place (KeepOrder), since a retry answered through HTTP would hold
//     back every message to the endpoint. courier demo --broker webhook.
//
// A receiving service behind a load balancer keeps each key's order
// however the requests are spread, because of how the sender sends and how
// the receiver answers. The relay publishes a key's messages one after
// another (relay package documentation, Ordering): a claim takes none of a
// key's rows while another of them is leased or waits for a retry,
// whichever relay holds it, and since the shop's fanout over the webhook
// Publishers is no broker.OrderKeeper, a batch sends a key's next message
// only once the previous one was published. The webhook Publisher does not
// pipeline a key on the wire either, even when handed a key's run (it is a
// broker.OrderKeeper): it sends a key's messages one after the other, each
// once the previous one was answered 2xx, and none after one that failed
// other than for good. The receiver's webhook.Handler answers 2xx only
// with its inbox consumer's verdict, which comes once the inbox transaction
// committed (200) or the message was parked (202). When the sender gives up
// on a request whose message an instance is still applying (a timeout, the
// instance's crash), it sends the message again, to whichever instance,
// whose inbox waits for the first transaction and skips the message if it
// committed. So the instances apply a key's messages in order, one at a
// time, across any number of them, as long as each answers only after its
// transaction committed. What that does not cover: a message the receiver
// parked (202, for a replay) or the sender gave up on (a dead letter after
// its attempts, or one refused for good with 410) no longer holds its key
// back, as the relay's contract says of dead letters; and the order is the
// one the relay publishes in, which is the order of writing only for
// writers of a key that are serialised (the saga's are). The chaos
// decorator changes nothing there: the next message of a key is not sent
// before the previous one is answered, so a reorder only swaps messages of
// different keys, and a duplicate, of the same key as its original, waits
// for it (KeepOrder) and is skipped.
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
