package kafka_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/kafka"
)

// A message whose topic Kafka can never hold is refused for good, however
// the cluster answers (kfake does not check a name's length), so it
// becomes a dead letter instead of holding its key back as an outage.
func TestTopicNameKafkaCannotHoldIsRejected(t *testing.T) {
	c := cluster(t)
	p := publisher(t, kafka.PublisherConfig{Config: kafka.Config{Brokers: c.ListenAddrs()}})
	for _, topic := range []string{strings.Repeat("t", 250), "注文", "a b"} {
		m := courier.NewMessage(topic, "k", "T", []byte("x"))
		err := p.Publish(context.Background(), []courier.Message{m})[0]
		if !errors.Is(err, broker.ErrRejected) || !strings.Contains(err.Error(), "not a valid Kafka topic name") {
			t.Errorf("topic %.20q…: Publish = %v, want broker.ErrRejected naming the topic's rule", topic, err)
		}
	}
}
