package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// createTopicTimeout is how long the cluster may take to create a topic.
const createTopicTimeout = 30 * time.Second

// EnsureTopic creates the Kafka topic for message topic topic (cfg's prefix
// added) through cl unless it exists. An existing topic is left as it is:
// its settings are the operator's. It fails without a request when tc is
// invalid (see TopicConfig.Validate).
func EnsureTopic(ctx context.Context, cl *kgo.Client, cfg Config, topic string, tc TopicConfig) error {
	if err := tc.Validate(); err != nil {
		return err
	}
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
	req.TimeoutMillis = int32(createTopicTimeout.Milliseconds())
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

// legalTopic reports whether Kafka can hold a topic named name: 1 to 249
// letters, digits, '.', '_' and '-', but not "." or "..".
func legalTopic(name string) bool {
	if name == "" || len(name) > 249 || name == "." || name == ".." {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
