package amqp

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/courier-go/courier/broker/internal/group"
	"github.com/courier-go/courier/broker/wire"
)

// Topology is a consuming service's queue and what it receives.
type Topology struct {
	// Queue is the durable quorum queue to declare. Empty: only the
	// exchange is declared.
	Queue string
	// Topics are bound to the queue, each as its routing key
	// (RoutingKeyPrefix+topic); topic-exchange wildcards work ("orders.*",
	// "#"). Empty: every topic under the prefix (RoutingKeyPrefix+"#").
	Topics []string
	// SingleActiveConsumer makes the queue deliver to one consumer at a
	// time (x-single-active-consumer), the others standing by: per-key
	// order with several instances of a service.
	SingleActiveConsumer bool
	// DeliveryLimit sets x-delivery-limit: after that many redeliveries the
	// queue dead-letters the message, or deletes it when no
	// DeadLetterExchange is set. 0 leaves the broker's default (none in
	// RabbitMQ 3.x, 20 in 4.x). Keep it above the inbox consumer's
	// MaxDeliveries; see the package documentation.
	DeliveryLimit int
	// DeadLetterExchange sets x-dead-letter-exchange: where the queue sends
	// the messages it gives up on. Declare that exchange (and a queue bound
	// to it) yourself.
	DeadLetterExchange string
	// DeadLetterRoutingKey sets x-dead-letter-routing-key; empty keeps each
	// message's routing key.
	DeadLetterRoutingKey string
	// Partitions, when set, spreads the messages by key over this many
	// queues instead of one, for a consumer whose instances share the keys
	// (SubscriberConfig.Partitions, the same number): PartitionQueue(Queue,
	// 0) to PartitionQueue(Queue, Partitions-1), each a quorum queue with a
	// single active consumer, bound to a consistent-hash exchange
	// (PartitionExchange(Queue), hashing the Courier-Key header) that
	// receives Topics from the exchange; and the fanout exchange on which
	// the consumer's instances announce themselves
	// (MembersExchange(Queue)). It needs RabbitMQ's
	// rabbitmq_consistent_hash_exchange plugin (rabbitmq-plugins enable
	// rabbitmq_consistent_hash_exchange). The queue Queue itself is not
	// declared. The number of partitions of a consumer cannot change:
	// declare new queues under another name to change it. See the package
	// documentation (Key partitions). Default 0: one queue.
	Partitions int
}

// PartitionQueue returns the name of partition p's queue of queue:
// "billing.3".
func PartitionQueue(queue string, p int) string { return queue + "." + strconv.Itoa(p) }

// PartitionExchange returns the name of the consistent-hash exchange that
// spreads queue's messages over its partitions: "billing.keys".
func PartitionExchange(queue string) string { return queue + ".keys" }

// MembersExchange returns the name of the fanout exchange on which the
// instances of queue's consumer announce themselves, with
// SubscriberConfig.Partitions: "billing.members". A subscriber declares
// it; delete it with the partition queues when the consumer is retired.
func MembersExchange(queue string) string { return queue + ".members" }

// consistentHash is the exchange type of RabbitMQ's consistent-hash
// plugin; hashHeader is its argument naming the header it hashes.
const (
	consistentHash = "x-consistent-hash"
	hashHeader     = "hash-header"
)

// Validate returns an error naming the field when EnsureTopology would
// refuse t: a negative DeliveryLimit, or Topics without a Queue to bind
// them to.
func (t Topology) Validate() error {
	switch {
	case t.DeliveryLimit < 0:
		return fmt.Errorf("amqp: Topology.DeliveryLimit is %d: use 0 (the broker's default) or more", t.DeliveryLimit)
	case t.Queue == "" && len(t.Topics) > 0:
		return errors.New("amqp: Topology.Topics without Topology.Queue: name the queue to bind them to")
	case t.Partitions < 0 || t.Partitions > group.MaxPartitions:
		return fmt.Errorf("amqp: Topology.Partitions is %d: use 0 (one queue) or 1 to %d", t.Partitions, group.MaxPartitions)
	case t.Partitions > 0 && t.Queue == "":
		return errors.New("amqp: Topology.Partitions without Topology.Queue: name the queue the partitions are named after")
	}
	return nil
}

// QueueArgs returns the arguments Topology declares its queue with.
func (t Topology) QueueArgs() amqp091.Table {
	args := amqp091.Table{amqp091.QueueTypeArg: amqp091.QueueTypeQuorum}
	if t.SingleActiveConsumer || t.Partitions > 0 {
		args[amqp091.SingleActiveConsumerArg] = true
	}
	if t.DeliveryLimit > 0 {
		args["x-delivery-limit"] = t.DeliveryLimit
	}
	if t.DeadLetterExchange != "" {
		args["x-dead-letter-exchange"] = t.DeadLetterExchange
	}
	if t.DeadLetterRoutingKey != "" {
		args["x-dead-letter-routing-key"] = t.DeadLetterRoutingKey
	}
	return args
}

// EnsureTopology declares cfg's exchange (durable, type topic) and, when
// t.Queue is set, a durable quorum queue bound to it for t.Topics (with
// t.Partitions, the partition queues and their exchanges instead). It is
// idempotent; a queue that exists with other arguments makes it fail with
// RabbitMQ's 406 PRECONDITION_FAILED (delete the queue or keep its
// arguments). It fails without connecting when cfg or t is invalid (see
// Config.Validate and Topology.Validate).
func EnsureTopology(ctx context.Context, cfg Config, t Topology) error {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	if err := t.Validate(); err != nil {
		return err
	}
	conn, err := cfg.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("amqp: open channel: %w", err)
	}
	step := func(what string, err error) error {
		if err != nil {
			return fmt.Errorf("amqp: %s: %w", what, err)
		}
		return ctx.Err()
	}
	if err := step("declare exchange "+cfg.Exchange,
		ch.ExchangeDeclare(cfg.Exchange, amqp091.ExchangeTopic, true, false, false, false, nil)); err != nil {
		return err
	}
	if t.Queue == "" {
		return nil
	}
	keys := make([]string, 0, max(len(t.Topics), 1))
	for _, topic := range t.Topics {
		keys = append(keys, cfg.RoutingKey(topic))
	}
	if len(keys) == 0 {
		keys = append(keys, cfg.RoutingKeyPrefix+"#")
	}
	if t.Partitions > 0 {
		return ensurePartitions(ctx, ch, cfg, t, keys, step)
	}
	_, err = ch.QueueDeclare(t.Queue, true, false, false, false, t.QueueArgs())
	if err := step("declare quorum queue "+t.Queue, err); err != nil {
		return err
	}
	for _, k := range keys {
		if err := step(fmt.Sprintf("bind queue %s to %s with %q", t.Queue, cfg.Exchange, k),
			ch.QueueBind(t.Queue, k, cfg.Exchange, false, nil)); err != nil {
			return err
		}
	}
	return nil
}

// ensurePartitions declares t's partition queues and the consistent-hash
// exchange that feeds them the messages of keys.
func ensurePartitions(ctx context.Context, ch *amqp091.Channel, cfg Config, t Topology, keys []string, step func(string, error) error) error {
	hx := PartitionExchange(t.Queue)
	err := ch.ExchangeDeclare(hx, consistentHash, true, false, false, false, amqp091.Table{hashHeader: wire.HeaderKey})
	var ae *amqp091.Error
	if errors.As(err, &ae) && ae.Code == amqp091.CommandInvalid && strings.Contains(ae.Reason, "exchange type") {
		return fmt.Errorf("amqp: declare exchange %s of type %s: %w: enable RabbitMQ's consistent-hash plugin (rabbitmq-plugins enable rabbitmq_consistent_hash_exchange) for Topology.Partitions", hx, consistentHash, err)
	}
	if err := step("declare exchange "+hx, err); err != nil {
		return err
	}
	for _, k := range keys {
		if err := step(fmt.Sprintf("bind exchange %s to %s with %q", hx, cfg.Exchange, k),
			ch.ExchangeBind(hx, k, cfg.Exchange, false, nil)); err != nil {
			return err
		}
	}
	mx := MembersExchange(t.Queue)
	if err := step("declare exchange "+mx, ch.ExchangeDeclare(mx, amqp091.ExchangeFanout, true, false, false, false, nil)); err != nil {
		return err
	}
	for p := range t.Partitions {
		q := PartitionQueue(t.Queue, p)
		_, err := ch.QueueDeclare(q, true, false, false, false, t.QueueArgs())
		if err := step("declare quorum queue "+q, err); err != nil {
			return err
		}
		// The binding's key is the queue's weight on the hash ring: every
		// partition takes an equal share of the keys.
		if err := step(fmt.Sprintf("bind queue %s to %s", q, hx), ch.QueueBind(q, "1", hx, false, nil)); err != nil {
			return err
		}
	}
	return nil
}
