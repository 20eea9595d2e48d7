package kafka

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/brokerkind"
)

// PingTimeout bounds the check that a Kafka cluster opened by URL (Kind's
// Open) answers.
const PingTimeout = 10 * time.Second

// Kind describes Apache Kafka to package brokerurl and the courier CLI:
// URLs kafka://host1:9092,host2:9092?topic_prefix= (see ParseURL), opened
// as a Publisher whose cluster must answer within PingTimeout, and read
// back by a Reader of the topics named. Topics are not created. It reads
// no Options but Flag and Env. Its configuration is a Config.
var Kind = brokerkind.Kind{
	Name:    "kafka",
	Schemes: []string{"kafka"},
	Form:    "kafka://host1:9092,host2:9092",
	Parse:   parseKindURL,
	Open:    openKind,
	LogFields: func(config any, _ brokerkind.Options) []any {
		return []any{"topic_prefix", config.(Config).TopicPrefix}
	},
}

func init() { brokerkind.Register(Kind) }

// parseKindURL reads raw with ParseURL.
func parseKindURL(raw string, opts brokerkind.Options) (any, error) {
	cfg, err := ParseURL(raw)
	if err != nil {
		return nil, fmt.Errorf("%s %q is not a Kafka URL (%s): use kafka://host1:9092,host2:9092?topic_prefix=", opts.FlagName(), brokerkind.Redact(raw),
			strings.TrimPrefix(brokerkind.Redacted(err, raw), "kafka: "))
	}
	return cfg, nil
}

// openKind makes the Publisher and checks that the cluster answers.
func openKind(ctx context.Context, raw string, config any, opts brokerkind.Options) (*brokerkind.Opened, error) {
	cfg, where := config.(Config), brokerkind.Redact(raw)
	pub, err := NewPublisher(PublisherConfig{Config: cfg})
	if err != nil {
		return nil, fmt.Errorf("%s %s: %v", opts.FlagName(), where, brokerkind.Redacted(err, raw))
	}
	pctx, cancel := context.WithTimeout(ctx, PingTimeout)
	defer cancel()
	if err := pub.Client().Ping(pctx); err != nil {
		pub.Close()
		return nil, fmt.Errorf("cannot reach Kafka at %s: %v; check %s and that the brokers listen there", where, brokerkind.ErrorText(err, raw), opts.Source())
	}
	return &brokerkind.Opened{
		Publisher: pub,
		Close:     func() error { pub.Close(); return nil },
		Reader: func(ctx context.Context, topics []string) (broker.Reader, func(), error) {
			if len(topics) == 0 {
				return nil, nil, fmt.Errorf("%s %s is a Kafka cluster, which keeps no list of Courier's topics: name the topics to read with --topic", opts.FlagName(), where)
			}
			r, err := NewReader(ctx, ReaderConfig{Config: cfg, Topics: topics})
			if err != nil {
				return nil, nil, err
			}
			return r, r.Close, nil
		},
	}, nil
}
