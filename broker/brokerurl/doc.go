// Package brokerurl turns a broker URL into an open [broker.Publisher], so
// that wiring code (the courier CLI, services, tests) does not switch over
// broker names. It knows no broker itself: each broker package describes
// its URLs, how it opens and what it reads back in a [brokerkind.Kind]
// that it registers, and brokerurl picks the kind by the URL's scheme.
// brokers.go lists the brokers linked with it, one import each: adding a
// broker takes its package and a line there.
//
// The URLs of the brokers Courier ships:
//
//	kafka://host1:9092,host2:9092?topic_prefix=shop.                  Apache Kafka
//	amqp://user:password@host:5672/vhost?exchange=courier&prefix=     RabbitMQ (also amqps://)
//	https://endpoint/path (also http://)                              webhooks: every topic to that endpoint
//	nats://host:4222 (also tls://; several servers comma-separated)   NATS JetStream
//
// See each broker's package for what its URL's parameters mean and which
// Options it reads: broker/kafka (ParseURL, Kind), broker/amqp (ParseURL,
// Kind), broker/webhook (Kind), broker/nats (ParseURL, Kind).
//
// Webhook signing secrets never come from the URL: they come from
// Options.WebhookSecrets or the environment variable Options.WebhookSecretEnv
// (default COURIER_WEBHOOK_SECRET), "whsec_…" secrets comma-separated so
// that keys rotate without a gap (see package broker/webhook).
//
// Open connects, so that a wrong address or credentials show at start-up
// (Kafka, RabbitMQ, NATS; a webhook endpoint is only reached by the first
// message), and creates what the broker needs unless told not to: the
// JetStream stream on NATS (Options.Stream, capturing every subject under
// the prefix), the exchange on RabbitMQ. Kafka topics are not created:
// create them with broker/kafka's EnsureTopic or the cluster's tools (a
// message whose topic does not exist fails with kafka.ErrNoTopic and is
// retried).
//
//	b, err := brokerurl.Open(ctx, os.Getenv("BROKER_URL"), brokerurl.Options{})
//	if err != nil {
//		return err
//	}
//	defer b.Close()
//	r, err := relay.New(st, b, relay.Config{})
//	if err != nil {
//		return err
//	}
//
// Broker.Reader reads back what the broker keeps, for an audit: the
// JetStream stream on NATS, the topics named on Kafka; RabbitMQ and
// webhook endpoints keep nothing to read back. Broker.LogFields says where
// the broker publishes, for a log line, and Broker.MessagingSystem names it
// in traces.
package brokerurl
