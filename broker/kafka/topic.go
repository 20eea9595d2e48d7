package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TopicConfig describes a topic EnsureTopic creates.
type TopicConfig struct {
	// Partitions of the topic: the most members of one consumer group
	// that receive at once. Default: the cluster's num.partitions.
	Partitions int
	// ReplicationFactor is how many brokers keep each partition. Default:
	// the cluster's default.replication.factor. Use 3 in production, with
	// min.insync.replicas=2 in Configs (see Durability in the package
	// documentation).
	ReplicationFactor int
	// Configs are topic settings such as "min.insync.replicas" or
	// "max.message.bytes".
	Configs map[string]string
}

// EnsureTopic creates the Kafka topic for message topic topic (cfg's prefix
// added) through cl unless it exists. An existing topic is left as it is:
// its settings are the operator's.
func EnsureTopic(ctx context.Context, cl *kgo.Client, cfg Config, topic string, tc TopicConfig) error {
	name := cfg.Topic(topic)
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic = name
	t.NumPartitions = -1
	if tc.Partitions > 0 {
		t.NumPartitions = int32(tc.Partitions)
	}
	t.ReplicationFactor = -1
	if tc.ReplicationFactor > 0 {
		t.ReplicationFactor = int16(tc.ReplicationFactor)
	}
	for k, v := range tc.Configs {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = k, kmsg.StringPtr(v)
		t.Configs = append(t.Configs, c)
	}
	req := kmsg.NewPtrCreateTopicsRequest()
	req.Topics = append(req.Topics, t)
	req.TimeoutMillis = 30_000
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("kafka: create topic %s: %w", name, err)
	}
	for _, rt := range resp.Topics {
		if err := kerr.ErrorForCode(rt.ErrorCode); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			msg := ""
			if rt.ErrorMessage != nil {
				msg = ": " + *rt.ErrorMessage
			}
			return fmt.Errorf("kafka: create topic %s: %w%s", name, err, msg)
		}
	}
	return nil
}
