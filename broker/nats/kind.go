package nats

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/brokerkind"
)

// Kind describes NATS JetStream to package brokerurl and the courier CLI:
// URLs nats://host:4222 (or tls://; several servers comma-separated, and
// the query of ParseURL), opened with Connect, the stream created by
// EnsureStream, and read back by a Reader of that stream. It reads the
// Options Logger, SubjectPrefix, NoPrefix, KeySubjects, Stream,
// StreamReplicas and NoCreate. Its configuration is a URLConfig.
var Kind = brokerkind.Kind{
	Name:      "nats",
	Schemes:   []string{"nats", "tls"},
	Form:      "nats://host:4222 (or tls://)",
	Parse:     parseKindURL,
	Open:      openKind,
	LogFields: logFields,
}

func init() { brokerkind.Register(Kind) }

// URLConfig is what a NATS broker URL says: the servers to connect to and
// the publisher's settings of its query (see ParseURL).
type URLConfig struct {
	// Servers are the URL's servers, comma-separated, without the query.
	Servers string
	// Publisher holds the settings of the query.
	Publisher PublisherConfig
}

// parseKindURL reads raw with ParseURL and checks that each server has a
// host.
func parseKindURL(raw string, opts brokerkind.Options) (any, error) {
	where := brokerkind.Redact(raw)
	servers, cfg, err := ParseURL(raw)
	if err != nil {
		return nil, fmt.Errorf("%s %q is not a NATS URL (%s): use nats://host:4222, several comma-separated, and optionally ?%s",
			opts.FlagName(), where, strings.TrimPrefix(brokerkind.Redacted(err, raw), "nats: "), strings.ReplaceAll(URLParams, ", ", "=…&"))
	}
	for _, s := range strings.Split(servers, ",") {
		if p, err := url.Parse(strings.TrimSpace(s)); err != nil || p.Host == "" {
			return nil, fmt.Errorf("%s %q is not a NATS URL: use nats://host:4222, several comma-separated", opts.FlagName(), where)
		}
	}
	return URLConfig{Servers: servers, Publisher: cfg}, nil
}

// mapping is how opts map topics to subjects.
func mapping(opts brokerkind.Options) Config {
	return Config{SubjectPrefix: opts.SubjectPrefix, NoPrefix: opts.NoPrefix, KeySubjects: opts.KeySubjects}
}

// streamName is opts.Stream, or DefaultStream.
func streamName(opts brokerkind.Options) string {
	if opts.Stream == "" {
		return DefaultStream
	}
	return opts.Stream
}

// openKind connects to the servers, creates the stream unless
// opts.NoCreate, and makes the Publisher.
func openKind(ctx context.Context, raw string, config any, opts brokerkind.Options) (*brokerkind.Opened, error) {
	u := config.(URLConfig)
	nc, err := Connect(u.Servers, connectionLog(opts)...)
	if err != nil {
		return nil, fmt.Errorf("cannot reach NATS at %s: %v; check %s and that nats-server runs with JetStream (-js)",
			brokerkind.Redact(raw), brokerkind.ErrorText(err, raw), opts.Source())
	}
	if !opts.NoCreate {
		if err := EnsureStream(ctx, nc, mapping(opts), StreamConfig{Name: streamName(opts), Replicas: opts.StreamReplicas}); err != nil {
			serr := streamError(ctx, nc, mapping(opts), streamName(opts), err)
			nc.Close()
			return nil, serr
		}
	}
	cfg := u.Publisher
	cfg.Config = mapping(opts)
	pub, err := NewPublisher(nc, cfg)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &brokerkind.Opened{
		Publisher: pub,
		Close:     func() error { nc.Close(); return nil },
		Check: func(context.Context) error {
			if s := nc.Status(); s != natsgo.CONNECTED {
				return fmt.Errorf("the connection to NATS is %s", s)
			}
			return nil
		},
		Reader: func(_ context.Context, topics []string) (broker.Reader, func(), error) {
			return kindReader(nc, opts, topics)
		},
	}, nil
}

// connectionLog logs the connection's losses and recoveries to
// opts.Logger.
func connectionLog(opts brokerkind.Options) []natsgo.Option {
	log := opts.Logger
	if log == nil {
		return nil
	}
	return []natsgo.Option{
		natsgo.DisconnectErrHandler(func(_ *natsgo.Conn, err error) {
			if err != nil {
				log.Warn("broker disconnected", "error", err)
			}
		}),
		natsgo.ReconnectHandler(func(*natsgo.Conn) { log.Info("broker reconnected") }),
	}
}

// kindReader reads back the stream the relay publishes into, its
// subjects mapped to topics as opts map them, over nc; with topics, only
// the messages of those topics are passed.
func kindReader(nc *natsgo.Conn, opts brokerkind.Options, topics []string) (broker.Reader, func(), error) {
	r, err := NewReader(nc, ReaderConfig{Config: mapping(opts), Stream: streamName(opts)})
	if err != nil {
		return nil, nil, err
	}
	if len(topics) > 0 {
		return onlyTopics{r: r, topics: topics}, nil, nil
	}
	return r, nil, nil
}

// logFields are the stream and the subjects' mapping.
func logFields(_ any, opts brokerkind.Options) []any {
	return []any{"stream", streamName(opts), "subject_prefix", mapping(opts).prefix(), "key_subjects", opts.KeySubjects}
}

// onlyTopics passes on what r reads back of topics alone.
type onlyTopics struct {
	r      broker.Reader
	topics []string
}

// ReadBack implements broker.Reader.
func (o onlyTopics) ReadBack(ctx context.Context, from, to time.Time, fn func(broker.Stored) error) (time.Time, error) {
	return o.r.ReadBack(ctx, from, to, func(s broker.Stored) error {
		if !slices.Contains(o.topics, s.Message.Topic) {
			return nil
		}
		return fn(s)
	})
}
