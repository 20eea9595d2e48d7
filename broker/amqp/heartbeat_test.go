package amqp_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/courier-go/courier/broker/amqp"
	"github.com/courier-go/courier/broker/brokerurl"
	"github.com/courier-go/courier/internal/testenv"
)

// The heartbeat a subscriber with Partitions runs with, as RabbitMQ has it
// (rabbitmqctl list_connections timeout), is the documented one however
// the subscriber is configured: half of MemberTimeout in whole seconds by
// default, whether its Config is written out, read by amqp.ParseURL or by
// brokerurl.Parse (which the courier CLI reads --broker-url with); the
// URL's heartbeat parameter, or Config.Heartbeat, when set. RabbitMQ
// closes a frozen instance's connection after two of them, which is when
// the others receive its partitions.
func TestPartitionsHeartbeatOnTheServer(t *testing.T) {
	srv := testenv.StartRabbitMQ(t) // a node of the test's own: all its connections are the test's
	const partitions = 2
	queue := "hb"
	withChannel(t, amqp.Config{URL: srv.URL}, func(ch *amqp091.Channel) error {
		for p := range partitions {
			if _, err := ch.QueueDeclare(amqp.PartitionQueue(queue, p), true, false, false, false, nil); err != nil {
				return err
			}
		}
		return nil
	})
	parsed := func(raw string) amqp.Config {
		cfg, err := amqp.ParseURL(raw)
		testenv.Must(t, err, "amqp.ParseURL")
		return cfg
	}
	cli := func(raw string) amqp.Config {
		u, err := brokerurl.Parse(raw, brokerurl.Options{Flag: "--broker-url"})
		testenv.Must(t, err, "brokerurl.Parse")
		return u.Config.(amqp.Config)
	}
	for _, tc := range []struct {
		name          string
		cfg           amqp.Config
		memberTimeout time.Duration
		want          string // seconds
	}{
		{"struct, defaults", amqp.Config{URL: srv.URL}, 0, "2"},
		{"amqp.ParseURL, defaults", parsed(srv.URL), 0, "2"},
		{"brokerurl.Parse, defaults", cli(srv.URL), 0, "2"},
		{"amqp.ParseURL, MemberTimeout 9s", parsed(srv.URL), 9 * time.Second, "4"},
		{"brokerurl.Parse, MemberTimeout 1.5s", cli(srv.URL), 1500 * time.Millisecond, "1"},
		{"amqp.ParseURL, heartbeat=3", parsed(srv.URL + "?heartbeat=3"), 0, "3"},
		{"brokerurl.Parse, heartbeat=7", cli(srv.URL + "?heartbeat=7"), 0, "7"},
		{"struct, Heartbeat 6s", amqp.Config{URL: srv.URL, Heartbeat: 6 * time.Second}, 0, "6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub, err := amqp.NewSubscriber(context.Background(), amqp.SubscriberConfig{Config: tc.cfg, Queue: queue,
				Partitions: partitions, MemberHeartbeat: 250 * time.Millisecond, MemberTimeout: tc.memberTimeout})
			testenv.Must(t, err, "subscriber")
			timeouts := func() []string {
				return strings.Fields(srv.Ctl("list_connections", "-q", "--no-table-headers", "timeout"))
			}
			// Its connection as the server has it: the only one on the node.
			var got []string
			testenv.Eventually(t, 30*time.Second, func() bool { got = timeouts(); return len(got) == 1 },
				"the node's connections' heartbeats: %v; want the subscriber's alone", testenv.Lazy(func() any { return timeouts() }))
			if got[0] != tc.want {
				t.Errorf("the server runs the subscriber's connection with a %ss heartbeat; want %ss", got[0], tc.want)
			}
			testenv.Must(t, sub.Close(), "close")
			testenv.Eventually(t, 30*time.Second, func() bool { return len(timeouts()) == 0 },
				"connections left after Close: %v", testenv.Lazy(func() any { return fmt.Sprint(timeouts()) }))
		})
	}
}
