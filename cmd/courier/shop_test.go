package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/courier-go/courier/broker/amqp"
	"github.com/courier-go/courier/cmd/courier/internal/shop"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/latency"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/dburl"
)

// courier demo runs the whole shop in one process, deploys version 2 of
// ChargeRequested mid-run (by default producer first, payment late: what
// waited is parked, then replayed) and reports its invariants; bad
// settings get one line naming the flag. Afterwards courier status on each
// service's database shows no consumer in trouble: the runs that failed or
// waited for the deploy went with their messages' application.
func TestDemoCommand(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := runCLI(t, "demo", "--orders", "60", "--data-dir", filepath.Join(dir, "demo"), "--crash", "payment", "--keep")
	if code != 0 || !strings.Contains(out, "All 8 invariants hold") || !strings.Contains(out, "payment ×1") ||
		!strings.Contains(out, "ChargeRequested deployed from version 1 to 2 mid-run, producer first") || !strings.Contains(out, "parked as newer_version") {
		t.Fatalf("demo: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, service := range []string{"orders", "payment", "inventory", "shipping"} {
		code, st, errOut := statusJSONOf(t, "--database-url", "sqlite://"+filepath.Join(dir, "demo", service+".db"))
		if code != 0 || len(st.Consumers) != 0 {
			t.Errorf("status of %s after the demo: exit %d, consumers %+v, want none in trouble\n%s", service, code, st.Consumers, errOut)
		}
	}
	for _, c := range []struct{ args, want string }{
		{"--orders 0", "--orders and --concurrency must be 1 or more"},
		{"--decline-rate 2", "--decline-rate is 2: use a probability from 0 to 1"},
		{"--database-url mysql://x/y", "the demo runs on PostgreSQL"},
		{"--broker-url http://x", "is not a NATS URL"},
		{"--broker kafka --broker-url nats://x:4222", "is not a Kafka URL"},
		{"--broker amqp --broker-url kafka://x", "is not a RabbitMQ URL"},
		{"--broker webhook --broker-url http://x", "--broker webhook takes no --broker-url"},
		{"--broker amqp --broker-url amqp://guest:guest@127.0.0.1:1/", "--broker amqp: cannot reach RabbitMQ at amqp://guest:xxxxx@127.0.0.1:1/"},
		{"--timeout 0s", "--timeout is 0s"},
		{"--step-timeout=-1s", "--step-timeout is -1s"},
		{"--newer-version-wait 0s", "--newer-version-wait is 0s"},
		{"--stock mug=-1", "--stock mug=-1"},
		{"--stream a.b", "--stream \"a.b\""},
	} {
		code, _, errOut := runCLI(t, append([]string{"demo", "--data-dir", filepath.Join(dir, "bad")}, strings.Fields(c.args)...)...)
		if code != 1 || !strings.Contains(errOut, c.want) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("demo %s: exit %d, stderr %q; want one line with %q", c.args, code, errOut, c.want)
		}
		if _, err := os.Stat(filepath.Join(dir, "bad")); err == nil {
			t.Errorf("demo %s failed after creating its --data-dir", c.args)
			testenv.Must(t, os.RemoveAll(filepath.Join(dir, "bad")), "remove")
		}
	}
}

// courier demo --broker runs the shop over each transport: Kafka in this
// process (kfake), webhooks between loopback ports, and RabbitMQ when the
// test environment has one.
func TestDemoCommandBrokers(t *testing.T) {
	for _, broker := range []string{"kafka", "webhook", "amqp"} {
		t.Run(broker, func(t *testing.T) {
			t.Parallel()
			args := []string{"demo", "--broker", broker, "--orders", "40", "--data-dir", filepath.Join(t.TempDir(), "demo"), "--crash", "inventory"}
			if broker == "amqp" {
				url := testenv.AMQP(t)
				deleteDemoQueues(t, url)
				args = append(args, "--broker-url", url)
			}
			code, out, errOut := runCLI(t, args...)
			if code != 0 || !strings.Contains(out, "All 8 invariants hold") || !strings.Contains(out, "inventory ×1") {
				t.Fatalf("demo --broker %s: exit %d\n%s\n%s", broker, code, out, errOut)
			}
		})
	}
}

// deleteDemoQueues deletes the demo's queues and exchanges from the test
// environment's RabbitMQ: a run of this test killed midway leaves them,
// and the demo rightly refuses to run on what it cannot tell it made.
func deleteDemoQueues(t *testing.T, url string) {
	t.Helper()
	conn, err := amqp091.Dial(url)
	testenv.Must(t, err, "dial RabbitMQ")
	defer conn.Close()
	ch, err := conn.Channel()
	testenv.Must(t, err, "channel")
	for _, s := range shop.Services {
		q := demoSubjectPrefix + s
		_, err := ch.QueueDelete(q, false, false, false)
		testenv.Must(t, err, "delete "+q)
		for p := range shop.DefaultKeyPartitions {
			_, err := ch.QueueDelete(amqp.PartitionQueue(q, p), false, false, false)
			testenv.Must(t, err, "delete a partition queue of "+q)
		}
		for _, x := range []string{amqp.PartitionExchange(q), amqp.MembersExchange(q)} {
			testenv.Must(t, ch.ExchangeDelete(x, false, false), "delete "+x)
		}
	}
}

// A RabbitMQ that does not answer at the default URL gets an error that
// says how to start one, which flag names another, and which brokers need
// nothing installed.
func TestDemoUnreachableRabbitMQ(t *testing.T) {
	refused := fmt.Errorf("amqp: connect: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
	err := unreachable("amqp", "RabbitMQ at "+defaultAMQPURL, true, refused)
	for _, want := range []string{"--broker amqp: cannot reach RabbitMQ at", "start RabbitMQ", "--broker-url amqp://", "kafka and webhook need nothing installed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// courier shop SERVICE runs each service as a process of its own: five
// processes on their own SQLite files and one NATS server, payment as two
// processes sharing its keys (--partitions), take an order from POST
// /orders to ShippingReady, then stop cleanly on SIGTERM; the two payment
// processes split payment's partitions between them.
func TestShopCommandProcesses(t *testing.T) {
	logs := shopProcesses(t, testenv.EmbeddedNATS(t).ClientURL(), 2, nil, "--partitions", "4")
	for i, log := range logs[shop.Payment] {
		shared := false
		for _, line := range strings.Split(log, "\n") {
			// Two members, and partitions taken: "partitions=[0 3]".
			if strings.Contains(line, "group: partitions consumed") && strings.Contains(line, `members="[vm`) &&
				strings.Count(line[strings.Index(line, "members="):], " ") > 1 && strings.Contains(line, `partitions="[`) &&
				!strings.Contains(line, `partitions="[]"`) {
				shared = true
			}
		}
		if !shared {
			t.Errorf("payment process %d took no share of the partitions beside the other:\n%s", i, log)
		}
	}
}

// The same four processes on Kafka (kfake, in the test's process).
func TestShopCommandProcessesKafka(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(shop.DefaultPartitions))
	testenv.Must(t, err, "kfake")
	t.Cleanup(c.Close)
	shopProcesses(t, "kafka://"+strings.Join(c.ListenAddrs(), ","), 1, nil)
}

// The four processes on NATS with their databases on PostgreSQL (a schema
// each), and on Kafka (kfake) with theirs on MySQL/MariaDB: each records
// its consumer's latency in its own database.
func TestShopCommandProcessesDialects(t *testing.T) {
	t.Run("nats-postgres", func(t *testing.T) {
		urls := map[string]string{}
		for _, s := range shop.Services {
			urls[s] = testenv.Postgres(t, nil).URL
		}
		shopProcesses(t, testenv.EmbeddedNATS(t).ClientURL(), 1, func(s string) string { return urls[s] })
	})
	t.Run("kafka-mysql", func(t *testing.T) {
		urls := map[string]string{}
		for _, s := range shop.Services {
			urls[s] = testenv.MySQL(t, nil).URL
		}
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(shop.DefaultPartitions))
		testenv.Must(t, err, "kfake")
		t.Cleanup(c.Close)
		shopProcesses(t, "kafka://"+strings.Join(c.ListenAddrs(), ","), 1, func(s string) string { return urls[s] })
	})
}

// shopProcesses runs the four services as processes on brokerURL, payment
// as payments processes, with extra flags, places an order and waits until
// it is ready to ship, then stops them. Each service's database is at
// dbURL(service), or a SQLite file of its own when dbURL is nil. It
// returns their logs, by service.
func shopProcesses(t *testing.T, brokerURL string, payments int, dbURL func(service string) string, extra ...string) map[string][]string {
	dir := t.TempDir()
	if dbURL == nil {
		dbURL = func(s string) string { return "sqlite://" + filepath.Join(dir, s+".db") }
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err, "free port")
	addr := l.Addr().String()
	l.Close()

	var procs []*exec.Cmd
	var names []string
	var logs []*bytes.Buffer
	ordersMetrics := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	for _, s := range shop.Services {
		n := 1
		if s == shop.Payment {
			n = payments
		}
		for range n {
			args := append([]string{"shop", s, "--database-url", dbURL(s), "--broker-url", brokerURL}, extra...)
			if s == shop.Orders {
				args = append(args, "--metrics-addr", ordersMetrics, "--http-addr", addr)
			}
			cmd := exec.Command(os.Args[0], args...)
			cmd.Env = append(os.Environ(), "COURIER_TEST_BE_CLI=1")
			var log bytes.Buffer
			cmd.Stderr = &log
			testenv.Must(t, cmd.Start(), "start "+s)
			t.Cleanup(func() { _ = cmd.Process.Kill() })
			procs, names, logs = append(procs, cmd), append(names, s), append(logs, &log)
		}
	}

	var placed shop.OrderPlaced
	testenv.Eventually(t, 30*time.Second, func() bool {
		body := `{"customer":"ann","sku":"mug","qty":1,"amount":1200}`
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/orders", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", `"cli-order-1"`)
		req.Header.Set("Authorization", "Bearer ann")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false // not listening yet
		}
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusCreated && json.NewDecoder(resp.Body).Decode(&placed) == nil
	}, "POST /orders never succeeded")

	var view shop.OrderView
	testenv.Eventually(t, 60*time.Second, func() bool {
		resp, err := http.Get(fmt.Sprintf("http://%s/orders/%s", addr, placed.ID))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(&view) == nil && view.State == shop.StateShippingReady
	}, "order %s did not reach %s: %s", placed.ID, shop.StateShippingReady, testenv.Lazy(func() any { return view }))
	if view.ChargeID == "" || view.ShipmentID == "" || len(view.History) < 4 {
		t.Fatalf("completed order without its charge, shipment or history: %+v", view)
	}
	// The orders service serves its metrics and health: its relay
	// published the saga's commands, its consumer applied the replies,
	// and its saga instance is counted, finished, by phase.
	testenv.Eventually(t, 30*time.Second, func() bool {
		resp, err := http.Get("http://" + ordersMetrics + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body := string(b)
		return strings.Contains(body, "courier_relay_published_messages_total") && !strings.Contains(body, "courier_relay_published_messages_total 0\n") &&
			strings.Contains(body, `courier_consumer_processed_messages_total{consumer="orders"}`) &&
			strings.Contains(body, `courier_saga_instances{state="completed",type="order"} 1`)
	}, "the orders service's /metrics lacks its relay, consumer or saga figures:\n%s", testenv.Lazy(func() any {
		resp, err := http.Get("http://" + ordersMetrics + "/metrics")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var lines []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "courier_") {
				lines = append(lines, l)
			}
		}
		return strings.Join(lines, "\n")
	}))
	if resp, err := http.Get("http://" + ordersMetrics + "/readyz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("orders /readyz: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	for _, cmd := range procs {
		testenv.Must(t, cmd.Process.Signal(syscall.SIGTERM), "SIGTERM")
	}
	out := map[string][]string{}
	for i, cmd := range procs {
		if err := cmd.Wait(); err != nil {
			t.Errorf("courier shop %s after SIGTERM: %v\n%s", names[i], err, logs[i])
		}
		out[names[i]] = append(out[names[i]], logs[i].String())
	}
	checkLatencyRecorded(t, dbURL)
	return out
}

// checkLatencyRecorded checks that each service's consumer recorded its
// latency in its database (courier shop --latency-every, on by default):
// the saga's commands and replies, applied once each, at least one sample
// each, of sane figures, recorded at the latest when it stopped.
func checkLatencyRecorded(t *testing.T, dbURL func(service string) string) {
	t.Helper()
	ctx := context.Background()
	for _, s := range shop.Services {
		db, err := dburl.Open(ctx, dbURL(s), dburl.Options{})
		testenv.Must(t, err, "open "+s)
		samples, err := db.Delivery().Latency(ctx, time.Time{}, store.MaxLatencyRows)
		db.Close()
		testenv.Must(t, err, "read the latency of "+s)
		sums, err := latency.Summarize(samples, time.Time{})
		testenv.Must(t, err, "summarize the latency of "+s)
		var applied int64
		for _, sum := range sums {
			if sum.Consumer != s {
				t.Errorf("%s's database holds the latency of consumer %q", s, sum.Consumer)
			}
			if sum.P99 <= 0 || sum.P99 > time.Minute {
				t.Errorf("%s applied %s at p99 %s, want a positive figure under a minute", s, sum.Topic, sum.P99)
			}
			applied += sum.Messages
		}
		if applied == 0 {
			t.Errorf("%s recorded no latency (courier_latency): %+v", s, samples)
		}
	}
}

// Without --data-dir the demo works in a temporary directory and leaves
// nothing behind, neither in the working directory nor in the temporary one.
func TestDemoLeavesNothingBehind(t *testing.T) {
	work, tmp := t.TempDir(), t.TempDir()
	t.Chdir(work)
	t.Setenv("TMPDIR", tmp)
	code, out, errOut := runCLI(t, "demo", "--orders", "20", "--crash", "none")
	if code != 0 || !strings.Contains(out, "All 8 invariants hold") {
		t.Fatalf("demo: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, d := range []string{work, tmp} {
		left, err := os.ReadDir(d)
		testenv.Must(t, err, "read dir")
		for _, l := range left {
			t.Errorf("the demo left %s in %s", l.Name(), d)
		}
	}
}
