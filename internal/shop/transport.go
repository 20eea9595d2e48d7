package shop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/courier-go/courier/broker"
	courieramqp "github.com/courier-go/courier/broker/amqp"
	"github.com/courier-go/courier/broker/kafka"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/store/dburl"
)

// Transport carries the shop's messages between its services. It prepares
// the broker for the shop's topics (a stream, topics, queues) and connects
// each incarnation of a service to it: a Publisher for the service's relay,
// a Subscriber of the service's topic for its inbox consumer. The services
// know nothing else of the broker, so the same shop runs on NATS JetStream
// ([NATSTransport], the default), Kafka ([KafkaTransport]), RabbitMQ
// ([AMQPTransport]) or plain HTTP webhooks ([WebhookTransport]).
//
// A transport delivers every message of a topic to each service that
// consumes it ([Consumers]).
type Transport interface {
	// Setup creates what the shop's topics need on the broker, unless it
	// exists, and starts what the transport serves itself. It is
	// idempotent; Start calls it before starting the services.
	Setup(ctx context.Context) error
	// Open connects one incarnation of service, which consumes topic, to
	// the broker. log receives the broker clients' own logs.
	Open(ctx context.Context, service, topic string, log *slog.Logger) (*Link, error)
	// Foreign returns the names of the broker's objects that Setup would
	// use, that exist, and that the transport cannot tell it made: neither
	// this value's Setup created them nor do they carry the shop's mark
	// (a NATS stream's description; Kafka topics and consumer groups and
	// RabbitMQ queues can carry none). Teardown leaves them alone; a
	// program that wants its run to start empty refuses to run on them.
	Foreign(ctx context.Context) ([]string, error)
	// Teardown deletes what this value's Setup created on the broker and
	// what carries the shop's mark, messages and consumer positions
	// included, so that the next run starts empty. It leaves anything else
	// as it is (see Foreign): the shop never deletes what it did not make.
	Teardown(ctx context.Context) error
	// Close releases what the transport holds (servers, connections); what
	// the broker stores stays. Call it once the services stopped.
	Close() error
	// String describes the broker, without secrets, for logs and reports.
	String() string
}

// Link is one service incarnation's connection to the broker.
type Link struct {
	// Publisher publishes the service's outbox (its relay's publisher).
	Publisher broker.Publisher
	// Subscriber receives the service's topic (its inbox consumer's
	// subscriber).
	Subscriber broker.Subscriber
	// KeepOrder asks the inbox consumer to retry a failing message in
	// place (inbox.ConsumerConfig.KeepOrder) rather than through the
	// broker: a webhook retry answers the sender 503 with Retry-After,
	// which holds back every message to the endpoint.
	KeepOrder bool
	// Close closes the subscriber, then the publisher and the connection
	// they share.
	Close func() error
}

// consumers maps each topic to the services that consume it.
var consumers = map[string][]string{
	TopicOrders: {Orders}, TopicPayment: {Payment}, TopicInventory: {Inventory}, TopicShipping: {Shipping},
}

// Consumers returns the services that consume topic: every command goes to
// the service that carries it out, every reply to orders.
func Consumers(topic string) []string {
	return slices.Clone(consumers[topic])
}

// topics returns the shop's topics in the order the saga visits them.
func topics() []string {
	return []string{TopicOrders, TopicPayment, TopicInventory, TopicShipping}
}

// NATSTransport carries the shop over NATS JetStream: one stream captures
// every subject under SubjectPrefix, and each service has a durable
// consumer of its topic's subject, named after the service.
type NATSTransport struct {
	// URL is the NATS server, nats://host:4222. Required.
	URL string
	// Stream is the JetStream stream, created when missing. Default
	// DefaultStream.
	Stream string
	// SubjectPrefix turns a topic into a subject. Default
	// DefaultSubjectPrefix.
	SubjectPrefix string
}

var _ Transport = (*NATSTransport)(nil)

func (t *NATSTransport) defaults() {
	if t.Stream == "" {
		t.Stream = DefaultStream
	}
	if t.SubjectPrefix == "" {
		t.SubjectPrefix = DefaultSubjectPrefix
	}
}

func (t *NATSTransport) connect(name string) (*natsgo.Conn, error) {
	t.defaults()
	nc, err := couriernats.Connect(t.URL, natsgo.Name(name))
	if err != nil {
		return nil, fmt.Errorf("%w; check the broker URL and that nats-server runs with JetStream (-js)", err)
	}
	return nc, nil
}

// streamConfig is the stream the shop creates.
func (t *NATSTransport) streamConfig() couriernats.StreamConfig {
	return couriernats.StreamConfig{Name: t.Stream, Description: Mark}
}

// Setup implements Transport: it creates the stream, marked.
func (t *NATSTransport) Setup(ctx context.Context) error {
	nc, err := t.connect("shop")
	if err != nil {
		return err
	}
	defer nc.Close()
	return couriernats.EnsureStream(ctx, nc, couriernats.Config{SubjectPrefix: t.SubjectPrefix}, t.streamConfig())
}

// marked reports whether the stream exists, and whether it carries the
// shop's mark.
func (t *NATSTransport) marked(ctx context.Context, js jetstream.JetStream) (exists, mine bool, err error) {
	s, err := js.Stream(ctx, t.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return false, false, nil
	}
	if err != nil {
		return false, false, fmt.Errorf("look up the stream %s: %w", t.Stream, err)
	}
	return true, s.CachedInfo().Config.Description == Mark, nil
}

// Foreign implements Transport: the stream, when it exists without the
// shop's mark.
func (t *NATSTransport) Foreign(ctx context.Context) ([]string, error) {
	nc, err := t.connect("shop")
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	exists, mine, err := t.marked(ctx, js)
	if err != nil || !exists || mine {
		return nil, err
	}
	return []string{"stream " + t.Stream}, nil
}

// Open implements Transport. The stream is created if missing, so a
// service run as a process of its own needs no Setup.
func (t *NATSTransport) Open(ctx context.Context, service, topic string, _ *slog.Logger) (*Link, error) {
	nc, err := t.connect("shop-" + service)
	if err != nil {
		return nil, err
	}
	mapping := couriernats.Config{SubjectPrefix: t.SubjectPrefix}
	if err := couriernats.EnsureStream(ctx, nc, mapping, t.streamConfig()); err != nil {
		nc.Close()
		return nil, err
	}
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping, AckTimeout: relayPublish})
	if err != nil {
		nc.Close()
		return nil, err
	}
	sub, err := couriernats.NewSubscriber(ctx, nc, couriernats.SubscriberConfig{
		Config: mapping, Stream: t.Stream, Consumer: service, Topics: []string{topic}, AckWait: ackWait,
	})
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &Link{Publisher: pub, Subscriber: sub, Close: func() error {
		err := sub.Close()
		nc.Close()
		return err
	}}, nil
}

// Teardown implements Transport: it deletes the stream, with its
// messages and consumers, when it carries the shop's mark.
func (t *NATSTransport) Teardown(ctx context.Context) error {
	nc, err := t.connect("shop")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if _, mine, err := t.marked(ctx, js); err != nil || !mine {
		return err
	}
	if err := js.DeleteStream(ctx, t.Stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("delete the stream %s: %w", t.Stream, err)
	}
	return nil
}

// Close implements Transport; a NATSTransport holds nothing between calls.
func (t *NATSTransport) Close() error { return nil }

// String implements Transport.
func (t *NATSTransport) String() string {
	t.defaults()
	return fmt.Sprintf("NATS JetStream %s, stream %s", dburl.Redact(t.URL), t.Stream)
}

// DefaultPartitions is the number of partitions KafkaTransport gives each
// topic it creates.
const DefaultPartitions = 4

// KafkaTransport carries the shop over Kafka: one topic per shop topic
// (TopicPrefix added), records keyed by order id, so that Kafka keeps each
// order's messages in order on one partition, and one consumer group per
// service (TopicPrefix + service name).
type KafkaTransport struct {
	// Brokers are the cluster's seed addresses, host:port. Required.
	Brokers []string
	// TopicPrefix is prepended to each topic and consumer group name.
	// Default none.
	TopicPrefix string
	// Partitions of each topic Setup creates. Default DefaultPartitions.
	Partitions int

	mu   sync.Mutex
	made map[string]bool // the topics and groups this value's Setup found missing
}

var _ Transport = (*KafkaTransport)(nil)

func (t *KafkaTransport) config() kafka.Config {
	return kafka.Config{Brokers: t.Brokers, TopicPrefix: t.TopicPrefix}
}

func (t *KafkaTransport) admin() (*kgo.Client, error) {
	if len(t.Brokers) == 0 {
		return nil, errors.New("shop: KafkaTransport.Brokers is empty: name the cluster's brokers, host:9092")
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(t.Brokers...), kgo.ClientID("courier-shop"))
	if err != nil {
		return nil, fmt.Errorf("kafka: new client: %w", err)
	}
	return cl, nil
}

// Setup implements Transport: it creates the topics. The topics and the
// services' consumer groups it finds missing are the ones Teardown deletes
// (the groups are created by the services' consumers).
func (t *KafkaTransport) Setup(ctx context.Context) error {
	cl, err := t.admin()
	if err != nil {
		return err
	}
	defer cl.Close()
	t.mu.Lock()
	defer t.mu.Unlock()
	found, err := t.existing(ctx, cl)
	if err != nil {
		return fmt.Errorf("%w; check that the Kafka cluster at %s is up", err, strings.Join(t.Brokers, ","))
	}
	if t.made == nil {
		t.made = map[string]bool{}
	}
	parts := t.Partitions
	if parts <= 0 {
		parts = DefaultPartitions
	}
	for _, topic := range topics() {
		if err := kafka.EnsureTopic(ctx, cl, t.config(), topic, kafka.TopicConfig{Partitions: parts}); err != nil {
			return fmt.Errorf("%w; check that the Kafka cluster at %s is up", err, strings.Join(t.Brokers, ","))
		}
	}
	for _, name := range append(t.topicNames(), t.groupNames()...) {
		if !found[name] {
			t.made[name] = true
		}
	}
	return nil
}

// topicNames are the shop's topics on the cluster; groupNames its
// services' consumer groups.
func (t *KafkaTransport) topicNames() []string {
	var names []string
	for _, topic := range topics() {
		names = append(names, t.config().Topic(topic))
	}
	return names
}

func (t *KafkaTransport) groupNames() []string {
	var names []string
	for _, s := range Services {
		names = append(names, t.TopicPrefix+s)
	}
	return names
}

// existing returns which of the shop's topics and consumer groups exist on
// the cluster.
func (t *KafkaTransport) existing(ctx context.Context, cl *kgo.Client) (map[string]bool, error) {
	found := map[string]bool{}
	meta := kmsg.NewPtrMetadataRequest()
	for _, name := range t.topicNames() {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(name)
		meta.Topics = append(meta.Topics, mt)
	}
	mresp, err := meta.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("kafka: list topics: %w", err)
	}
	for _, mt := range mresp.Topics {
		if kerr.ErrorForCode(mt.ErrorCode) == nil && mt.Topic != nil {
			found[*mt.Topic] = true
		}
	}
	groups := kmsg.NewPtrDescribeGroupsRequest()
	groups.Groups = t.groupNames()
	gresp, err := groups.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("kafka: describe consumer groups: %w", err)
	}
	for _, g := range gresp.Groups {
		// A group nobody made is described as Dead (or not found).
		if kerr.ErrorForCode(g.ErrorCode) == nil && g.State != "Dead" && g.State != "" {
			found[g.Group] = true
		}
	}
	return found, nil
}

// Foreign implements Transport: the shop's topics and consumer groups that
// exist and that this value's Setup did not find missing.
func (t *KafkaTransport) Foreign(ctx context.Context) ([]string, error) {
	cl, err := t.admin()
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	t.mu.Lock()
	defer t.mu.Unlock()
	found, err := t.existing(ctx, cl)
	if err != nil {
		return nil, err
	}
	var foreign []string
	for _, name := range t.topicNames() {
		if found[name] && !t.made[name] {
			foreign = append(foreign, "topic "+name)
		}
	}
	for _, name := range t.groupNames() {
		if found[name] && !t.made[name] {
			foreign = append(foreign, "consumer group "+name)
		}
	}
	return foreign, nil
}

// Open implements Transport. It creates the topics if missing, so a service
// run as a process of its own needs no Setup.
func (t *KafkaTransport) Open(ctx context.Context, service, topic string, log *slog.Logger) (*Link, error) {
	if err := t.Setup(ctx); err != nil {
		return nil, err
	}
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Config: t.config(), AckTimeout: relayPublish})
	if err != nil {
		return nil, err
	}
	sub, err := kafka.NewSubscriber(ctx, kafka.SubscriberConfig{
		Config: t.config(), Group: t.TopicPrefix + service, Topics: []string{topic}, Logger: log,
	})
	if err != nil {
		pub.Close()
		return nil, err
	}
	return &Link{Publisher: pub, Subscriber: sub, Close: func() error {
		err := sub.Close()
		pub.Close()
		return err
	}}, nil
}

// Teardown implements Transport: it deletes the topics and the services'
// consumer groups that this value's Setup found missing, and waits until
// the cluster no longer lists those topics.
func (t *KafkaTransport) Teardown(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var topicNames, groupNames []string
	for _, name := range t.topicNames() {
		if t.made[name] {
			topicNames = append(topicNames, name)
		}
	}
	for _, name := range t.groupNames() {
		if t.made[name] {
			groupNames = append(groupNames, name)
		}
	}
	if len(topicNames)+len(groupNames) == 0 {
		return nil
	}
	cl, err := t.admin()
	if err != nil {
		return err
	}
	defer cl.Close()
	del := kmsg.NewPtrDeleteTopicsRequest()
	for _, name := range topicNames {
		del.TopicNames = append(del.TopicNames, name)
		dt := kmsg.NewDeleteTopicsRequestTopic()
		dt.Topic = kmsg.StringPtr(name)
		del.Topics = append(del.Topics, dt)
	}
	resp, err := del.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("kafka: delete the shop's topics: %w", err)
	}
	for _, r := range resp.Topics {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
			return fmt.Errorf("kafka: delete topic %s: %w", deref(r.Topic), err)
		}
	}
	groups := kmsg.NewPtrDeleteGroupsRequest()
	groups.Groups = groupNames
	gresp, err := groups.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("kafka: delete the shop's consumer groups: %w", err)
	}
	for _, g := range gresp.Groups {
		if err := kerr.ErrorForCode(g.ErrorCode); err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
			return fmt.Errorf("kafka: delete consumer group %s: %w", g.Group, err)
		}
	}
	clear(t.made)
	// Deletion is asynchronous on a real cluster: a topic created again
	// before it is gone would be deleted under the next run.
	for {
		meta := kmsg.NewPtrMetadataRequest()
		for _, name := range topicNames {
			mt := kmsg.NewMetadataRequestTopic()
			mt.Topic = kmsg.StringPtr(name)
			meta.Topics = append(meta.Topics, mt)
		}
		mresp, err := meta.RequestWith(ctx, cl)
		if err != nil {
			return fmt.Errorf("kafka: list topics: %w", err)
		}
		left := 0
		for _, mt := range mresp.Topics {
			if kerr.ErrorForCode(mt.ErrorCode) == nil {
				left++
			}
		}
		if left == 0 {
			return nil
		}
		if !sleep(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Close implements Transport; a KafkaTransport holds nothing between calls.
func (t *KafkaTransport) Close() error { return nil }

// String implements Transport.
func (t *KafkaTransport) String() string {
	return fmt.Sprintf("Kafka %s, topics %s…", strings.Join(t.Brokers, ","), t.config().Topic(""))
}

// AMQPTransport carries the shop over RabbitMQ: messages go to one topic
// exchange, and each service consumes a durable quorum queue of its own
// (QueuePrefix + service name) bound to its topic. The queues have a single
// active consumer, so that a restarted service takes over from its previous
// incarnation rather than next to it, and a delivery limit well above the
// inbox consumer's, so that the inbox parks a failing message before
// RabbitMQ would drop it.
type AMQPTransport struct {
	// Config is the broker's URL, exchange and routing key prefix (see
	// broker/amqp ParseURL). Config.URL is required.
	Config courieramqp.Config
	// QueuePrefix is prepended to each service's name to name its queue.
	// Default DefaultSubjectPrefix ("shop.").
	QueuePrefix string

	mu   sync.Mutex
	made map[string]bool // the queues this value's Setup found missing
}

var _ Transport = (*AMQPTransport)(nil)

// amqpDeliveryLimit is x-delivery-limit of the shop's queues: well above
// the inbox consumer's MaxDeliveries (25) and the redeliveries restarts
// cause.
const amqpDeliveryLimit = 1000

func (t *AMQPTransport) queue(service string) string {
	p := t.QueuePrefix
	if p == "" {
		p = DefaultSubjectPrefix
	}
	return p + service
}

// Setup implements Transport: it declares the exchange, and each service's
// queue bound to its topic. The queues it finds missing are the ones
// Teardown deletes.
func (t *AMQPTransport) Setup(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	found, err := t.existing(ctx)
	if err != nil {
		return err
	}
	if t.made == nil {
		t.made = map[string]bool{}
	}
	for _, s := range Services {
		if !found[t.queue(s)] {
			t.made[t.queue(s)] = true
		}
	}
	for _, topic := range topics() {
		for _, s := range consumers[topic] {
			err := courieramqp.EnsureTopology(ctx, t.Config, courieramqp.Topology{
				Queue: t.queue(s), Topics: []string{topic}, SingleActiveConsumer: true, DeliveryLimit: amqpDeliveryLimit,
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// Open implements Transport. It declares the queues if missing, so a
// service run as a process of its own needs no Setup.
func (t *AMQPTransport) Open(ctx context.Context, service, _ string, _ *slog.Logger) (*Link, error) {
	if err := t.Setup(ctx); err != nil {
		return nil, err
	}
	pub, err := courieramqp.NewPublisher(courieramqp.PublisherConfig{Config: t.Config, ConfirmTimeout: relayPublish})
	if err != nil {
		return nil, err
	}
	sub, err := courieramqp.NewSubscriber(ctx, courieramqp.SubscriberConfig{Config: t.Config, Queue: t.queue(service), ConsumerTag: "shop-" + service})
	if err != nil {
		_ = pub.Close()
		return nil, err
	}
	return &Link{Publisher: pub, Subscriber: sub, Close: func() error {
		return errors.Join(sub.Close(), pub.Close())
	}}, nil
}

// dial connects to the broker for the transport's own work.
func (t *AMQPTransport) dial() (*amqp091.Connection, error) {
	conn, err := amqp091.DialConfig(t.Config.URL, amqp091.Config{Dial: amqp091.DefaultDial(5 * time.Second)})
	if err != nil {
		return nil, fmt.Errorf("amqp: connect to %s: %w", dburl.Redact(t.Config.URL), err)
	}
	return conn, nil
}

// existing returns which of the services' queues exist: a passive
// declaration of one that does not fails with 404 (and closes its
// channel, so each takes a channel of its own).
func (t *AMQPTransport) existing(ctx context.Context) (map[string]bool, error) {
	conn, err := t.dial()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	found := map[string]bool{}
	for _, s := range Services {
		ch, err := conn.Channel()
		if err != nil {
			return nil, fmt.Errorf("amqp: open channel: %w", err)
		}
		_, err = ch.QueueDeclarePassive(t.queue(s), true, false, false, false, nil)
		var ae *amqp091.Error
		switch {
		case err == nil:
			found[t.queue(s)] = true
			_ = ch.Close()
		case errors.As(err, &ae) && ae.Code == amqp091.NotFound:
		default:
			return nil, fmt.Errorf("amqp: look up queue %s: %w", t.queue(s), err)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	return found, nil
}

// Foreign implements Transport: the services' queues that exist and that
// this value's Setup did not find missing.
func (t *AMQPTransport) Foreign(ctx context.Context) ([]string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	found, err := t.existing(ctx)
	if err != nil {
		return nil, err
	}
	var foreign []string
	for _, s := range Services {
		if q := t.queue(s); found[q] && !t.made[q] {
			foreign = append(foreign, "queue "+q)
		}
	}
	return foreign, nil
}

// Teardown implements Transport: it deletes the services' queues that
// this value's Setup found missing, with their messages. The exchange
// stays: others may publish to it.
func (t *AMQPTransport) Teardown(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.made) == 0 {
		return nil
	}
	conn, err := t.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("amqp: open channel: %w", err)
	}
	for _, s := range Services {
		if !t.made[t.queue(s)] {
			continue
		}
		// RabbitMQ deletes a queue that does not exist without complaint.
		if _, err := ch.QueueDelete(t.queue(s), false, false, false); err != nil {
			return fmt.Errorf("amqp: delete queue %s: %w", t.queue(s), err)
		}
		delete(t.made, t.queue(s))
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// Close implements Transport; an AMQPTransport holds nothing between calls.
func (t *AMQPTransport) Close() error { return nil }

// String implements Transport.
func (t *AMQPTransport) String() string {
	ex := t.Config.Exchange
	if ex == "" {
		ex = courieramqp.DefaultExchange
	}
	return fmt.Sprintf("RabbitMQ %s, exchange %s, queues %s…", dburl.Redact(t.Config.URL), ex, t.queue(""))
}
