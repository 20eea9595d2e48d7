package amqp

import (
	"context"
	"errors"
	"fmt"

	"github.com/courier-go/courier/broker/brokerkind"
)

// errKeepsNothing is why nothing is read back from RabbitMQ.
var errKeepsNothing = errors.New("RabbitMQ queues hand each message to one consumer and keep no copy: the audit reads NATS JetStream streams and Kafka topics")

// Kind describes RabbitMQ to package brokerurl and the courier CLI: URLs
// amqp://user:password@host:5672/vhost?exchange=courier&prefix= (or
// amqps://; see ParseURL), opened as a Publisher after the exchange is
// declared (EnsureTopology) unless Options.NoCreate. Queues keep no copy
// to read back. It reads the Options Channels and NoCreate. Its
// configuration is a Config.
var Kind = brokerkind.Kind{
	Name:       "amqp",
	System:     "rabbitmq",
	Schemes:    []string{"amqp", "amqps"},
	Form:       "amqp://user:password@host:5672/vhost",
	Parse:      parseKindURL,
	Open:       openKind,
	NoReadBack: errKeepsNothing,
	LogFields: func(config any, _ brokerkind.Options) []any {
		cfg := config.(Config)
		return []any{"exchange", cfg.Exchange, "routing_key_prefix", cfg.RoutingKeyPrefix}
	},
}

func init() { brokerkind.Register(Kind) }

// parseKindURL reads raw with ParseURL.
func parseKindURL(raw string, opts brokerkind.Options) (any, error) {
	cfg, err := ParseURL(raw)
	if err != nil {
		return nil, fmt.Errorf("%s %q is not a RabbitMQ URL (%s): use amqp://user:password@host:5672/vhost?exchange=courier&prefix=",
			opts.FlagName(), brokerkind.Redact(raw), brokerkind.Redacted(err, raw))
	}
	return cfg, nil
}

// openKind declares the exchange unless opts.NoCreate, and connects the
// Publisher.
func openKind(ctx context.Context, raw string, config any, opts brokerkind.Options) (*brokerkind.Opened, error) {
	cfg, where := config.(Config), brokerkind.Redact(raw)
	if !opts.NoCreate {
		if err := EnsureTopology(ctx, cfg, Topology{}); err != nil {
			return nil, fmt.Errorf("cannot declare exchange %s on RabbitMQ at %s: %v; check %s",
				cfg.Exchange, where, brokerkind.ErrorText(err, raw), opts.Source())
		}
	}
	pub, err := NewPublisher(PublisherConfig{Config: cfg, Channels: opts.Channels})
	if err != nil {
		return nil, fmt.Errorf("%s: %v", opts.FlagName(), brokerkind.Redacted(err, raw))
	}
	if err := pub.Connect(); err != nil {
		_ = pub.Close()
		return nil, fmt.Errorf("cannot reach RabbitMQ at %s: %v; check %s", where, brokerkind.ErrorText(err, raw), opts.Source())
	}
	return &brokerkind.Opened{Publisher: pub, Close: pub.Close}, nil
}
