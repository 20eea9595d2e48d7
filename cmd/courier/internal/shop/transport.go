package shop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
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
// consumes it ([Consumers]). The instances of one service, each connected
// by an Open of its own, consume the service's topic as one consumer: a
// message goes to one of them, and Sharing says how they share the
// messages.
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
	// Sharing describes, for reports, how the instances of one service
	// share its messages, completing "each service ran as 2 instances …":
	// "sharing its keys over 8 partitions …". Call it after Setup.
	Sharing() string
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
	// which holds back every message to the endpoint. The consumer keeps
	// order as well whenever Subscriber shares the service's keys among
	// its instances (broker.KeySharer).
	KeepOrder bool
	// GiveBack asks the incarnation to give back to the broker, before
	// Close, the deliveries its inbox consumer left unsettled when it
	// stopped (a crash): asks for them again at once. A subscriber that
	// shares keys by partition (NATS, RabbitMQ) waits on Close, up to its
	// MemberTimeout for each partition it holds and 5s in all, for the
	// deliveries handed out to be settled before it hands its partitions
	// on, which nothing would do after a crash. A killed process leaves
	// them with the broker, which delivers them again: RabbitMQ as soon as
	// its connection drops, NATS once another instance took the partition.
	GiveBack bool
	// Close closes the subscriber, then the publisher and the connection
	// they share.
	Close func() error
	// Kill, if set, ends the link as a killed process's would end: the
	// connection dropped before anything is said to the broker, then
	// what is left closed. An incarnation that stops without draining (a
	// crash) calls it instead of Close. NATS with partitions sets it: Close
	// would give up each partition the instance holds in turn, waiting up
	// to its MemberTimeout for the server to count no delivery pending,
	// which the messages pulled ahead and never handed over keep it from
	// doing; killed, the instance's partitions go to the others once they
	// find it silent, as they would a killed process's.
	Kill func() error
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
// every subject under SubjectPrefix, each message's key the last token of
// its subject (broker/nats Config.KeySubjects), and each service consumes
// its topic's subjects as a consumer named after the service. Its instances
// share the keys over Partitions partitions, or else share the service's
// durable consumer.
type NATSTransport struct {
	// URL is the NATS server, nats://host:4222. Required.
	URL string
	// Stream is the JetStream stream, created when missing. Default
	// DefaultStream.
	Stream string
	// SubjectPrefix turns a topic into a subject. Default
	// DefaultSubjectPrefix.
	SubjectPrefix string
	// Partitions, when more than 0, shares each service's keys among its
	// instances over this many partitions (broker/nats
	// SubscriberConfig.Partitions): each key's messages go to one instance
	// at a time, in order, through a work-queue stream per service
	// (broker/nats PartitionStream), made by the first instance. Every
	// instance of a service must use the same number. It needs
	// nats-server 2.10 or later; on an older server the instances share
	// the durable consumer instead, as with 0, and Open logs it (Sharing
	// says it too). Default 0: the instances of a service share its
	// durable consumer, each taking the next message, so a key's order
	// holds within one instance only.
	Partitions int

	mu      sync.Mutex
	version string // the server's, as last connected
}

var _ Transport = (*NATSTransport)(nil)

// The timing of the instances' groups with partitions: an instance
// announces itself every memberHeartbeat, and one unheard of for
// memberTimeout (killed, frozen) gives up its partitions to the others. A
// new instance listens for two heartbeats before it takes any partition,
// so a short heartbeat makes the shop's instances, which start and restart
// often, consume sooner; the announcements cost the broker next to
// nothing.
const (
	memberHeartbeat = 100 * time.Millisecond
	memberTimeout   = time.Second
)

func (t *NATSTransport) defaults() {
	if t.Stream == "" {
		t.Stream = DefaultStream
	}
	if t.SubjectPrefix == "" {
		t.SubjectPrefix = DefaultSubjectPrefix
	}
}

// mapping is how the shop's topics and keys become subjects.
func (t *NATSTransport) mapping() couriernats.Config {
	return couriernats.Config{SubjectPrefix: t.SubjectPrefix, KeySubjects: true}
}

func (t *NATSTransport) connect(name string) (*natsgo.Conn, error) {
	t.defaults()
	nc, err := couriernats.Connect(t.URL, natsgo.Name(name))
	if err != nil {
		return nil, fmt.Errorf("%w; check the broker URL and that nats-server runs with JetStream (-js)", err)
	}
	t.mu.Lock()
	t.version = nc.ConnectedServerVersion()
	t.mu.Unlock()
	return nc, nil
}

// partitioned reports whether the instances share keys by partition: when
// Partitions is set and the server (as last connected) can.
func (t *NATSTransport) partitioned() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.Partitions > 0 && serverAtLeast(t.version, 2, 10)
}

// serverAtLeast reports whether version, "2.10.4", is major.minor or
// later; false when it is not a version.
func serverAtLeast(version string, major, minor int) bool {
	var ma, mi int
	if _, err := fmt.Sscanf(version, "%d.%d", &ma, &mi); err != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
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
	return couriernats.EnsureStream(ctx, nc, t.mapping(), t.streamConfig())
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

// partitionStreams returns the services' partition streams that exist
// (whether or not Partitions is set now: an earlier run's count too), each
// with whether it is the shop's: Courier's, made for a service's consumer
// of the stream, when the stream carries the shop's mark (mine).
func (t *NATSTransport) partitionStreams(ctx context.Context, js jetstream.JetStream, mine bool) (map[string]bool, error) {
	found := map[string]bool{}
	for _, svc := range Services {
		name := couriernats.PartitionStream(t.Stream, svc)
		s, err := js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("look up the stream %s: %w", name, err)
		}
		c := s.CachedInfo().Config
		found[name] = mine && strings.HasPrefix(c.Description, couriernats.PartitionMark+svc+" ") &&
			len(c.Sources) == 1 && c.Sources[0].Name == t.Stream
	}
	return found, nil
}

// Foreign implements Transport: the stream, when it exists without the
// shop's mark, and the services' partition streams that exist and that
// are not Courier's partitions of the shop's stream.
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
	if err != nil {
		return nil, err
	}
	var foreign []string
	if exists && !mine {
		foreign = append(foreign, "stream "+t.Stream)
	}
	parts, err := t.partitionStreams(ctx, js, mine)
	if err != nil {
		return nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(parts)) {
		if !parts[name] {
			foreign = append(foreign, "stream "+name)
		}
	}
	return foreign, nil
}

// Open implements Transport. The stream is created if missing, so a
// service run as a process of its own needs no Setup; so is the
// partition stream of service with Partitions (by the subscriber).
func (t *NATSTransport) Open(ctx context.Context, service, topic string, log *slog.Logger) (*Link, error) {
	nc, err := t.connect("shop-" + service)
	if err != nil {
		return nil, err
	}
	mapping := t.mapping()
	if err := couriernats.EnsureStream(ctx, nc, mapping, t.streamConfig()); err != nil {
		nc.Close()
		return nil, err
	}
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping, AckTimeout: relayPublish})
	if err != nil {
		nc.Close()
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg := couriernats.SubscriberConfig{
		Config: mapping, Stream: t.Stream, Consumer: service, Topics: []string{topic}, AckWait: ackWait, Logger: log,
	}
	switch v := nc.ConnectedServerVersion(); {
	case t.Partitions <= 0:
	case serverAtLeast(v, 2, 10):
		cfg.Partitions, cfg.MemberHeartbeat, cfg.MemberTimeout = t.Partitions, memberHeartbeat, memberTimeout
	default:
		log.Warn("nats-server cannot share the keys by partition (2.10 or later can): the instances share the durable consumer, so a key's order holds within one instance only",
			"server_version", v, "partitions", t.Partitions)
	}
	sub, err := couriernats.NewSubscriber(ctx, nc, cfg)
	if err != nil {
		nc.Close()
		return nil, err
	}
	link := &Link{Publisher: pub, Subscriber: sub, GiveBack: sub.SharesKeys(), Close: func() error {
		err := sub.Close()
		nc.Close()
		return err
	}}
	if sub.SharesKeys() {
		link.Kill = func() error {
			nc.Close()
			return sub.Close()
		}
	}
	return link, nil
}

// Teardown implements Transport: when the stream carries the shop's mark,
// it deletes the services' partition streams made of it, then the stream,
// with their messages and consumers.
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
	parts, err := t.partitionStreams(ctx, js, true)
	if err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(parts)) {
		if !parts[name] {
			continue // not the shop's: left alone
		}
		if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("delete the stream %s: %w", name, err)
		}
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

// Sharing implements Transport.
func (t *NATSTransport) Sharing() string {
	t.mu.Lock()
	v := t.version
	t.mu.Unlock()
	switch {
	case t.Partitions <= 0:
		return "on its durable consumer: the messages split between them, a key's order kept within an instance only"
	case !t.partitioned():
		return fmt.Sprintf("on its durable consumer, as nats-server %s cannot share the keys by partition (2.10 or later can): the messages split between them, a key's order not kept across them; the sagas converge all the same", v)
	}
	return fmt.Sprintf("sharing its keys over %d partitions (a work-queue stream each): a key's messages in order, one instance at a time", t.Partitions)
}

// DefaultPartitions is the number of partitions KafkaTransport gives each
// topic it creates.
const DefaultPartitions = 4

// kafkaHeartbeat is how often an instance heartbeats its consumer group.
const kafkaHeartbeat = 250 * time.Millisecond

// KafkaTransport carries the shop over Kafka: one topic per shop topic
// (TopicPrefix added), records keyed by order id, so that Kafka keeps each
// order's messages in order on one partition, and one consumer group per
// service (TopicPrefix + service name), whose members, the service's
// instances, share the partitions of its topic.
type KafkaTransport struct {
	// Brokers are the cluster's seed addresses, host:port. Required.
	Brokers []string
	// TopicPrefix is prepended to each topic and consumer group name.
	// Default none.
	TopicPrefix string
	// Partitions of each topic Setup creates; a service's consumer group
	// shares its topic's partitions among the service's instances. Default
	// DefaultPartitions.
	Partitions int

	mu    sync.Mutex
	made  map[string]bool // the topics and groups this value's Setup found missing
	parts map[int]bool    // the partition counts of the shop's topics, as Setup found or made them
	ready bool            // Setup succeeded
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
	found, counts, err := t.existing(ctx, cl)
	if err != nil {
		return fmt.Errorf("%w; check that the Kafka cluster at %s is up", err, strings.Join(t.Brokers, ","))
	}
	if t.made == nil {
		t.made = map[string]bool{}
	}
	t.parts = map[int]bool{}
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
	for _, name := range t.topicNames() {
		if n, ok := counts[name]; ok {
			t.parts[n] = true
		} else {
			t.parts[parts] = true
		}
	}
	t.ready = true
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
// the cluster, and the existing topics' partition counts.
func (t *KafkaTransport) existing(ctx context.Context, cl *kgo.Client) (found map[string]bool, partitions map[string]int, err error) {
	found, partitions = map[string]bool{}, map[string]int{}
	meta := kmsg.NewPtrMetadataRequest()
	for _, name := range t.topicNames() {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(name)
		meta.Topics = append(meta.Topics, mt)
	}
	mresp, err := meta.RequestWith(ctx, cl)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka: list topics: %w", err)
	}
	for _, mt := range mresp.Topics {
		if kerr.ErrorForCode(mt.ErrorCode) == nil && mt.Topic != nil {
			found[*mt.Topic] = true
			partitions[*mt.Topic] = len(mt.Partitions)
		}
	}
	groups := kmsg.NewPtrDescribeGroupsRequest()
	groups.Groups = t.groupNames()
	gresp, err := groups.RequestWith(ctx, cl)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka: describe consumer groups: %w", err)
	}
	for _, g := range gresp.Groups {
		// A group nobody made is described as Dead (or not found).
		if kerr.ErrorForCode(g.ErrorCode) == nil && g.State != "Dead" && g.State != "" {
			found[g.Group] = true
		}
	}
	return found, partitions, nil
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
	found, _, err := t.existing(ctx, cl)
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

// Open implements Transport. It creates the topics if this value's Setup
// did not, so a service run as a process of its own needs no Setup.
func (t *KafkaTransport) Open(ctx context.Context, service, topic string, log *slog.Logger) (*Link, error) {
	t.mu.Lock()
	ready := t.ready
	t.mu.Unlock()
	if !ready {
		if err := t.Setup(ctx); err != nil {
			return nil, err
		}
	}
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Config: t.config(), AckTimeout: relayPublish})
	if err != nil {
		return nil, err
	}
	sub, err := kafka.NewSubscriber(ctx, kafka.SubscriberConfig{
		Config: t.config(), Group: t.TopicPrefix + service, Topics: []string{topic}, Logger: log,
		// A member learns of a rebalance (another instance joined or
		// left) from its next heartbeat: franz-go's default of 3s would
		// leave a new instance without partitions that long.
		Options: []kgo.Opt{kgo.HeartbeatInterval(kafkaHeartbeat)},
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
	t.ready = false
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

// Sharing implements Transport.
func (t *KafkaTransport) Sharing() string {
	t.mu.Lock()
	counts := slices.Sorted(maps.Keys(t.parts))
	t.mu.Unlock()
	parts := "the partitions"
	if len(counts) == 1 {
		parts = fmt.Sprintf("the %d partitions", counts[0])
	}
	return "in its consumer group, sharing " + parts + " of its topic: a key's messages in order, one instance at a time"
}

// AMQPTransport carries the shop over RabbitMQ: messages go to one topic
// exchange, and each service consumes durable quorum queues of its own
// (named after QueuePrefix + service name) bound to its topic, with a
// delivery limit well above the inbox consumer's, so that the inbox parks a
// failing message before RabbitMQ would drop it.
//
// With Partitions, a consistent-hash exchange spreads each service's
// messages by key over that many queues, and the service's instances share
// them (broker/amqp Topology.Partitions and SubscriberConfig.Partitions):
// each key's messages go to one instance at a time, in order. Without, the
// service has one queue with a single active consumer: one instance
// consumes, the others stand by, and a restarted one takes over from its
// previous incarnation rather than next to it.
type AMQPTransport struct {
	// Config is the broker's URL, exchange and routing key prefix (see
	// broker/amqp ParseURL). Config.URL is required.
	Config courieramqp.Config
	// QueuePrefix is prepended to each service's name to name its queue.
	// Default DefaultSubjectPrefix ("shop.").
	QueuePrefix string
	// Partitions, when more than 0, shares each service's keys among its
	// instances over this many queues (QueuePrefix + service + ".0" and so
	// on, fed by the exchange QueuePrefix + service + ".keys"; the
	// instances find one another on the fanout exchange
	// QueuePrefix + service + ".members"). It
	// needs RabbitMQ's rabbitmq_consistent_hash_exchange plugin. Every
	// instance of a service must use the same number. Default 0: a queue
	// per service with a single active consumer.
	Partitions int

	mu    sync.Mutex
	made  map[string]bool // the queues and exchanges this value's Setup found missing, by amqpObject.String
	ready bool            // Setup succeeded
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

// amqpObject is a queue or an exchange the shop uses.
type amqpObject struct {
	exchange bool
	name     string
}

func (o amqpObject) String() string {
	if o.exchange {
		return "exchange " + o.name
	}
	return "queue " + o.name
}

// objects returns what service uses on the broker, besides the topic
// exchange others may publish to: its queue, or its partition queues, its
// consistent-hash exchange and the exchange on which its instances
// announce themselves (amqp.MembersExchange).
func (t *AMQPTransport) objects(service string) []amqpObject {
	q := t.queue(service)
	if t.Partitions <= 0 {
		return []amqpObject{{name: q}}
	}
	var objs []amqpObject
	for p := range t.Partitions {
		objs = append(objs, amqpObject{name: courieramqp.PartitionQueue(q, p)})
	}
	return append(objs, amqpObject{exchange: true, name: courieramqp.PartitionExchange(q)}, amqpObject{exchange: true, name: courieramqp.MembersExchange(q)})
}

// allObjects returns what every service uses.
func (t *AMQPTransport) allObjects() []amqpObject {
	var objs []amqpObject
	for _, s := range Services {
		objs = append(objs, t.objects(s)...)
	}
	return objs
}

// Setup implements Transport: it declares the exchange and each service's
// queues (bound to its topic) and, with Partitions, its consistent-hash
// exchange. The queues and exchanges of the services it finds missing are
// the ones Teardown deletes (a service's ".members" exchange included).
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
	for _, o := range t.allObjects() {
		if !found[o.String()] {
			t.made[o.String()] = true
		}
	}
	for _, topic := range topics() {
		for _, s := range consumers[topic] {
			err := courieramqp.EnsureTopology(ctx, t.Config, courieramqp.Topology{
				Queue: t.queue(s), Topics: []string{topic}, SingleActiveConsumer: true, DeliveryLimit: amqpDeliveryLimit,
				Partitions: max(t.Partitions, 0),
			})
			if err != nil {
				return err
			}
		}
	}
	t.ready = true
	return nil
}

// Open implements Transport. It declares the queues if this value's Setup
// did not, so a service run as a process of its own needs no Setup.
func (t *AMQPTransport) Open(ctx context.Context, service, _ string, log *slog.Logger) (*Link, error) {
	t.mu.Lock()
	ready := t.ready
	t.mu.Unlock()
	if !ready {
		if err := t.Setup(ctx); err != nil {
			return nil, err
		}
	}
	pub, err := courieramqp.NewPublisher(courieramqp.PublisherConfig{Config: t.Config, ConfirmTimeout: relayPublish})
	if err != nil {
		return nil, err
	}
	cfg := courieramqp.SubscriberConfig{Config: t.Config, Queue: t.queue(service), ConsumerTag: "shop-" + service, Logger: log}
	if t.Partitions > 0 {
		// Each partition's consumer is tagged with the instance's member id.
		cfg.ConsumerTag, cfg.Partitions, cfg.MemberHeartbeat, cfg.MemberTimeout = "", t.Partitions, memberHeartbeat, memberTimeout
	}
	sub, err := courieramqp.NewSubscriber(ctx, cfg)
	if err != nil {
		_ = pub.Close()
		return nil, err
	}
	return &Link{Publisher: pub, Subscriber: sub, GiveBack: t.Partitions > 0, Close: func() error {
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

// existing returns which of the services' queues and exchanges exist, by
// amqpObject.String: a passive declaration of one that does not fails
// with 404 (and closes its channel, so each takes a channel of its own).
func (t *AMQPTransport) existing(ctx context.Context) (map[string]bool, error) {
	conn, err := t.dial()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	found := map[string]bool{}
	for _, o := range t.allObjects() {
		ch, err := conn.Channel()
		if err != nil {
			return nil, fmt.Errorf("amqp: open channel: %w", err)
		}
		if o.exchange {
			err = ch.ExchangeDeclarePassive(o.name, amqp091.ExchangeFanout, true, false, false, false, nil)
		} else {
			_, err = ch.QueueDeclarePassive(o.name, true, false, false, false, nil)
		}
		var ae *amqp091.Error
		switch {
		case err == nil:
			found[o.String()] = true
			_ = ch.Close()
		case errors.As(err, &ae) && ae.Code == amqp091.NotFound:
		default:
			_ = ch.Close()
			return nil, fmt.Errorf("amqp: look up %s: %w", o, err)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	return found, nil
}

// Foreign implements Transport: the services' queues and exchanges that
// exist and that this value's Setup did not find missing.
func (t *AMQPTransport) Foreign(ctx context.Context) ([]string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	found, err := t.existing(ctx)
	if err != nil {
		return nil, err
	}
	var foreign []string
	for _, o := range t.allObjects() {
		if found[o.String()] && !t.made[o.String()] {
			foreign = append(foreign, o.String())
		}
	}
	return foreign, nil
}

// Teardown implements Transport: it deletes the services' queues and
// exchanges that this value's Setup found missing, with the queues'
// messages. The topic exchange stays: others may publish to it.
func (t *AMQPTransport) Teardown(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ready = false
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
	for _, o := range t.allObjects() {
		if !t.made[o.String()] {
			continue
		}
		// RabbitMQ deletes a queue or an exchange that does not exist
		// without complaint.
		if o.exchange {
			err = ch.ExchangeDelete(o.name, false, false)
		} else {
			_, err = ch.QueueDelete(o.name, false, false, false)
		}
		if err != nil {
			return fmt.Errorf("amqp: delete %s: %w", o, err)
		}
		delete(t.made, o.String())
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

// Sharing implements Transport.
func (t *AMQPTransport) Sharing() string {
	if t.Partitions <= 0 {
		return "on its queue, which has a single active consumer: one instance consumes, the others stand by"
	}
	return fmt.Sprintf("sharing its keys over %d queues fed by a consistent-hash exchange: a key's messages in order, one instance at a time", t.Partitions)
}
