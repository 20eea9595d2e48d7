package brokertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/courier-go/courier/broker"
)

// Timing is how the instances of a consumer that shares keys find out that
// one of them is gone: each announces itself every Heartbeat, and one
// unheard of for Timeout is gone (NATS and RabbitMQ: SubscriberConfig's
// MemberHeartbeat and MemberTimeout; Kafka: the consumer group's heartbeat
// interval and session timeout).
type Timing struct {
	Heartbeat time.Duration
	Timeout   time.Duration
}

// Process is an instance of a consumer that shares keys, as a process of
// its own opens it (see Child).
type Process struct {
	// Recipe is the harness's description of the consumer
	// (Instance.SharedRecipe).
	Recipe string
	// Timing is the consumer's.
	Timing Timing
	// Dial maps broker addresses (Instance.BrokerAddrs) to the addresses
	// to connect to instead: proxies the suite cuts. Addresses it does not
	// hold are dialled as they are.
	Dial map[string]string
}

// Addr returns the address to connect to for the broker address addr.
func (p Process) Addr(addr string) string {
	if to, ok := p.Dial[addr]; ok {
		return to
	}
	return addr
}

// Opener opens, in a process of its own, the subscriber of the instance p
// describes.
type Opener func(ctx context.Context, p Process) (broker.Subscriber, error)

// child is what the suite tells a process it starts as an instance.
type child struct {
	Process Process
	Name    string        // the instance's, in the log
	Log     string        // the file every application is appended to
	Work    time.Duration // how long applying a message takes
	Slow    time.Duration // how long applying a message marked slow takes
}

// envChild holds a child's description, in JSON, in the environment of a
// process the pause sweep starts.
const envChild = "COURIER_BROKERTEST_INSTANCE"

// Child runs this process as an instance of a consumer that shares keys,
// opened with open, when the pause sweep started it so (see the package
// documentation), and exits when the sweep stops it; otherwise it returns
// at once. Call it first thing in TestMain of a broker package whose
// Instance gives a SharedRecipe.
func Child(open Opener) {
	raw := os.Getenv(envChild)
	if raw == "" {
		return
	}
	var c child
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		fmt.Fprintf(os.Stderr, "brokertest: %s: %v\n", envChild, err)
		os.Exit(2)
	}
	if err := c.run(open); err != nil {
		fmt.Fprintf(os.Stderr, "brokertest: instance %s: %v\n", c.Name, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// run receives until SIGTERM, applying each delivery: a line "instance key
// sequence" appended to the log (one write, so that the log's order is the
// order of the applications across processes), then the acknowledgement.
// A key's messages are applied one at a time, in the order received.
func (c child) run(open Opener) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	log, err := os.OpenFile(c.Log, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	defer log.Close()
	sub, err := open(ctx, c.Process)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer sub.Close()
	for {
		d, err := sub.Next(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, broker.ErrUnavailable):
			return err // closed under it
		case err != nil:
			fmt.Fprintf(os.Stderr, "brokertest: instance %s: next: %v\n", c.Name, err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		m, err := sub.Decode(d.Raw())
		if err != nil {
			return fmt.Errorf("decode: %w", err)
		}
		seq, slow := strings.CutSuffix(string(m.Payload), slowMark)
		if slow {
			time.Sleep(c.Slow)
		} else {
			time.Sleep(c.Work)
		}
		if _, err := fmt.Fprintf(log, "%s %s %s\n", c.Name, m.Key, seq); err != nil {
			return err
		}
		if err := d.Ack(ctx); err != nil && ctx.Err() == nil {
			fmt.Fprintf(os.Stderr, "brokertest: instance %s: ack: %v\n", c.Name, err)
		}
	}
}

// slowMark ends the payload of a message whose application takes
// child.Slow.
const slowMark = "!"
