package inbox_test

import (
	"context"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/internal/testenv"
)

const (
	envChild       = "COURIER_TEST_INBOX_CHILD"
	envChildTx     = "COURIER_TEST_INBOX_TX"  // the parent's transaction type (see childDialect)
	envChildURL    = "COURIER_TEST_INBOX_URL" // the database
	envChildNATS   = "COURIER_TEST_INBOX_NATS"
	envChildPrefix = "COURIER_TEST_INBOX_PREFIX"
	envChildStream = "COURIER_TEST_INBOX_STREAM"
)

// TestConsumerChildProcess is not a test: it is the consumer process that
// TestKilledBetweenCommitAndAck starts. It applies one message, commits, and
// kills itself instead of acknowledging.
func TestConsumerChildProcess(t *testing.T) {
	if os.Getenv(envChild) != "1" {
		return
	}
	pg, std := childDialect(os.Getenv(envChildTx))
	if pg.connect != nil {
		consumeAndDie(t, pg)
	} else {
		consumeAndDie(t, std)
	}
}

func consumeAndDie[TTx any](t *testing.T, d dialect[TTx]) {
	db, sub, ib := childConsumer(t, d)
	c, err := inbox.NewConsumer(ib, dieOnAck{sub}, db.cs, recordEffect(db, "ledger"), inbox.ConsumerConfig{})
	if err != nil {
		panic(err)
	}
	_ = c.Run(context.Background()) // never returns: the first ack kills the process
}

// childConsumer connects a child process's "ledger" inbox and subscription
// to the database and stream its parent named in the environment.
func childConsumer[TTx any](t *testing.T, d dialect[TTx]) (*database[TTx], *couriernats.Subscriber, *inbox.Inbox[TTx]) {
	db := d.connect(t, os.Getenv(envChildURL))
	nc, err := couriernats.Connect(os.Getenv(envChildNATS))
	if err != nil {
		panic(err)
	}
	sub, err := couriernats.NewSubscriber(context.Background(), nc, couriernats.SubscriberConfig{
		Config: couriernats.Config{SubjectPrefix: os.Getenv(envChildPrefix)}, Stream: os.Getenv(envChildStream),
		Consumer: "ledger", AckWait: time.Second,
	})
	if err != nil {
		panic(err)
	}
	ib, err := inbox.New(db.inbox, "ledger")
	if err != nil {
		panic(err)
	}
	return db, sub, ib
}

// dieOnAck's deliveries kill the process when acknowledged: after the
// consumer's transaction committed, before the broker hears of it.
type dieOnAck struct{ broker.Subscriber }

func (s dieOnAck) Next(ctx context.Context) (broker.Delivery, error) {
	d, err := s.Subscriber.Next(ctx)
	if err != nil {
		return nil, err
	}
	return dyingDelivery{d}, nil
}

type dyingDelivery struct{ broker.Delivery }

func (dyingDelivery) Ack(context.Context) error {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

func TestKilledBetweenCommitAndAck(t *testing.T) {
	onEachDialect(t, testKilledBetweenCommitAndAck, testKilledBetweenCommitAndAck)
}

func testKilledBetweenCommitAndAck[TTx any](t *testing.T, d dialect[TTx]) {
	e := newEnv(t, d)
	m := courier.NewMessage("ledger", "acct-1", "Credit", []byte("+100"))
	e.publish(m)
	cmd := exec.Command(os.Args[0], "-test.run=^TestConsumerChildProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envChild+"=1", envChildTx+"="+txType[TTx](), envChildURL+"="+e.db.url, envChildNATS+"="+e.natsURL,
		envChildPrefix+"="+e.mapping.SubjectPrefix, envChildStream+"="+e.stream)
	cmd.Stderr = os.Stderr
	testenv.Must(t, cmd.Start(), "start consumer")
	err := cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("consumer did not die at the ack: %v", err)
	}
	if n := e.effects(m); n != 1 {
		t.Fatalf("%d effects after the commit, want 1", n)
	}
	// The broker never got the ack: it redelivers, and the inbox skips it.
	c := e.run("ledger", recordEffect(e.db, "ledger"), inbox.ConsumerConfig{})
	testenv.Eventually(t, 15*time.Second, func() bool { return c.Metrics().Duplicates == 1 }, "redelivery not skipped: %v", testenv.Lazy(func() any { return c.Metrics() }))
	if n := e.effects(m); n != 1 || c.Metrics().Applied != 0 {
		t.Fatalf("%d effects, metrics %+v: want the one effect from before the crash", n, c.Metrics())
	}
}
