package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/kafka"
	"github.com/courier-go/courier/internal/testenv"
)

func newReader(t testing.TB, cfg kafka.ReaderConfig) *kafka.Reader {
	t.Helper()
	r, err := kafka.NewReader(context.Background(), cfg)
	testenv.Must(t, err, "reader")
	t.Cleanup(r.Close)
	return r
}

// readBack returns what r reads back over [from, to) and since.
func readBack(t testing.TB, r broker.Reader, from, to time.Time) ([]broker.Stored, time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []broker.Stored
	since, err := r.ReadBack(ctx, from, to, func(s broker.Stored) error {
		got = append(got, s)
		return nil
	})
	testenv.Must(t, err, "read back")
	return got, since
}

// byLog groups stored messages by log, checking each log's offsets
// increase.
func byLog(t testing.TB, got []broker.Stored) map[string][]broker.Stored {
	t.Helper()
	logs := map[string][]broker.Stored{}
	for _, s := range got {
		if l := logs[s.Log]; len(l) > 0 && s.Offset <= l[len(l)-1].Offset {
			t.Errorf("log %s: offset %d after %d", s.Log, s.Offset, l[len(l)-1].Offset)
		}
		logs[s.Log] = append(logs[s.Log], s)
	}
	return logs
}

// sameMessages fails t unless got holds exactly want's messages (in any
// order across logs), each decoded whole.
func sameMessages(t testing.TB, got []broker.Stored, want []courier.Message) {
	t.Helper()
	wanted := map[[16]byte]courier.Message{}
	for _, m := range want {
		wanted[m.ID] = m
	}
	for _, s := range got {
		w, ok := wanted[s.Message.ID]
		if !ok || s.Err != nil || s.Message.Topic != w.Topic || s.Message.Key != w.Key || s.Message.Type != w.Type || string(s.Message.Payload) != string(w.Payload) {
			t.Errorf("read back %+v (err %v) at %s@%d, want %+v", s.Message, s.Err, s.Log, s.Offset, w)
		}
		delete(wanted, s.Message.ID)
	}
	if len(got) != len(want) || len(wanted) > 0 {
		t.Fatalf("read back %d messages, want %d; %d missing", len(got), len(want), len(wanted))
	}
}

// produceAt produces n messages of topic "orders" through cl, message i
// to partition i%2 with key "k-<partition>", stamped base+i seconds (a
// producer may stamp its records: CreateTime).
func produceAt(t testing.TB, cl *kgo.Client, cfg kafka.Config, n int, base time.Time) []courier.Message {
	t.Helper()
	var msgs []courier.Message
	for i := range n {
		m := courier.NewMessage("orders", fmt.Sprintf("k-%d", i%2), "Numbered", []byte(fmt.Sprint(i)))
		rec := cfg.ToRecord(&m)
		rec.Partition, rec.Timestamp = int32(i%2), base.Add(time.Duration(i)*time.Second)
		testenv.Must(t, cl.ProduceSync(context.Background(), rec).FirstErr(), "produce")
		msgs = append(msgs, m)
	}
	return msgs
}

// Records read back from two partitions, whole and in each partition's
// offset order, a key's in the order published; a record of another
// producer passed with Err; an empty window at once.
func TestReaderReadsBackPartitions(t *testing.T) {
	c := cluster(t)
	cfg := kafka.Config{Brokers: c.ListenAddrs(), TopicPrefix: testenv.Name("rb") + "."}
	testenv.Must(t, kafka.EnsureTopic(context.Background(), admin(t, c), cfg, "orders", kafka.TopicConfig{Partitions: 2}), "create topic")
	pub := publisher(t, kafka.PublisherConfig{Config: cfg})
	from := time.Now().Add(-time.Minute)
	var sent []courier.Message
	for i := range 12 {
		sent = append(sent, courier.NewMessage("orders", fmt.Sprintf("key-%d", i%4), fmt.Sprintf("Type%d", i), []byte(fmt.Sprint(i))))
	}
	for i, err := range pub.Publish(context.Background(), sent) {
		testenv.Must(t, err, fmt.Sprintf("publish %d", i))
	}
	testenv.Must(t, admin(t, c).ProduceSync(context.Background(), &kgo.Record{Topic: cfg.Topic("orders"), Key: []byte("other"), Value: []byte("raw")}).FirstErr(), "produce raw")

	r := newReader(t, kafka.ReaderConfig{Config: cfg, Topics: []string{"orders"}})
	all, since := readBack(t, r, from, time.Now().Add(time.Minute))
	if !since.IsZero() {
		t.Errorf("since %s, want zero: the partitions hold all they stored", since)
	}
	var raw []broker.Stored
	var courierOnes []broker.Stored
	for _, s := range all {
		if s.Err != nil {
			raw = append(raw, s)
		} else {
			courierOnes = append(courierOnes, s)
		}
	}
	sameMessages(t, courierOnes, sent)
	if len(raw) != 1 || !errors.Is(raw[0].Err, courier.ErrMalformed) || raw[0].Message.Topic != "orders" || raw[0].Message.Key != "other" || string(raw[0].Message.Payload) != "raw" {
		t.Errorf("record without Courier's headers: %+v", raw)
	}
	logs := byLog(t, all)
	if len(logs) != 2 {
		t.Errorf("read back from logs %v, want both partitions of %s", logs, cfg.Topic("orders"))
	}
	for log := range logs {
		if !strings.HasPrefix(log, cfg.Topic("orders")+"/") {
			t.Errorf("log %q, want %s/<partition>", log, cfg.Topic("orders"))
		}
	}
	// A key's messages come in the order published, from one log.
	for k := range 4 {
		key := fmt.Sprintf("key-%d", k)
		var want, got []string
		var keyLogs []string
		for _, m := range sent {
			if m.Key == key {
				want = append(want, string(m.Payload))
			}
		}
		for _, s := range courierOnes {
			if s.Message.Key == key {
				got = append(got, string(s.Message.Payload))
				if len(keyLogs) == 0 || keyLogs[len(keyLogs)-1] != s.Log {
					keyLogs = append(keyLogs, s.Log)
				}
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) || len(keyLogs) != 1 {
			t.Errorf("key %s: read back %v from logs %v, want %v from one log", key, got, keyLogs, want)
		}
	}

	start := time.Now()
	for _, w := range [][2]time.Time{{from, from}, {time.Now().Add(time.Hour), time.Now().Add(2 * time.Hour)}} {
		if got, since := readBack(t, r, w[0], w[1]); len(got) != 0 || !since.IsZero() {
			t.Errorf("window [%s, %s): read back %d, since %s; want nothing", w[0], w[1], len(got), since)
		}
	}
	if d := time.Since(start); d > 5*time.Second { // well under the 15s a read waits for a record
		t.Errorf("empty windows took %s", d)
	}
	stop := errors.New("enough")
	n := 0
	if _, err := r.ReadBack(context.Background(), from, time.Now().Add(time.Hour), func(broker.Stored) error { n++; return stop }); err != stop || n != 1 {
		t.Errorf("fn's error: ReadBack returned %v after %d calls, want it after 1", err, n)
	}
}

// A window by timestamp: records before from and at or after to are left
// out, to the millisecond.
func TestReaderReadsBackAWindowByTime(t *testing.T) {
	c := cluster(t)
	cfg := kafka.Config{Brokers: c.ListenAddrs(), TopicPrefix: testenv.Name("rb") + "."}
	testenv.Must(t, kafka.EnsureTopic(context.Background(), admin(t, c), cfg, "orders", kafka.TopicConfig{Partitions: 2}), "create topic")
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	testenv.Must(t, err, "producer")
	defer prod.Close()
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	sent := produceAt(t, prod, cfg, 10, base)
	r := newReader(t, kafka.ReaderConfig{Config: cfg, Topics: []string{"orders"}})

	all, _ := readBack(t, r, base, base.Add(time.Hour))
	sameMessages(t, all, sent)
	for _, s := range all {
		if i := int(s.Message.Payload[0] - '0'); !s.At.Equal(base.Add(time.Duration(i)*time.Second)) || s.Offset != int64(i/2) {
			t.Errorf("message %d: at %s offset %d, want %s offset %d", i, s.At, s.Offset, base.Add(time.Duration(i)*time.Second), i/2)
		}
	}
	// [3s, 7s): messages 3 to 6. From a millisecond after 2s: still 3.
	got, since := readBack(t, r, base.Add(3*time.Second), base.Add(7*time.Second))
	sameMessages(t, got, sent[3:7])
	if !since.IsZero() {
		t.Errorf("since %s, want zero", since)
	}
	got, _ = readBack(t, r, base.Add(2*time.Second+time.Microsecond), base.Add(7*time.Second-time.Microsecond))
	sameMessages(t, got, sent[3:7])
}

// since follows a partition's start offset moved by a deletion, and a
// topic that does not exist is named.
func TestReaderSinceAndMissingTopics(t *testing.T) {
	c := cluster(t)
	cfg := kafka.Config{Brokers: c.ListenAddrs(), TopicPrefix: testenv.Name("rb") + "."}
	adm := admin(t, c)
	testenv.Must(t, kafka.EnsureTopic(context.Background(), adm, cfg, "orders", kafka.TopicConfig{Partitions: 2}), "create topic")
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	testenv.Must(t, err, "producer")
	defer prod.Close()
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	sent := produceAt(t, prod, cfg, 10, base) // partition 0: 0 2 4 6 8; partition 1: 1 3 5 7 9
	r := newReader(t, kafka.ReaderConfig{Config: cfg, Topics: []string{"orders"}})

	// Partition 0 loses offsets 0 and 1 (messages 0 and 2), partition 1
	// offset 0 (message 1).
	deletions := make(kadm.Offsets)
	deletions.Add(kadm.Offset{Topic: cfg.Topic("orders"), Partition: 0, At: 2})
	deletions.Add(kadm.Offset{Topic: cfg.Topic("orders"), Partition: 1, At: 1})
	resp, err := kadm.NewClient(adm).DeleteRecords(context.Background(), deletions)
	testenv.Must(t, err, "delete records")
	testenv.Must(t, resp.Error(), "delete records")

	got, since := readBack(t, r, base, base.Add(time.Hour))
	sameMessages(t, got, []courier.Message{sent[3], sent[4], sent[5], sent[6], sent[7], sent[8], sent[9]})
	if want := base.Add(4 * time.Second); !since.Equal(want) {
		t.Errorf("since %s, want %s: the latest first record left of the partitions that lost records", since, want)
	}
	if _, since := readBack(t, r, base.Add(4*time.Second), base.Add(time.Hour)); !since.IsZero() {
		t.Errorf("read from the first records left: since %s, want zero", since)
	}

	// A topic that does not exist: NewReader names it, and so does
	// ReadBack once a topic is deleted.
	_, err = kafka.NewReader(context.Background(), kafka.ReaderConfig{Config: cfg, Topics: []string{"orders", "nope"}})
	if !errors.Is(err, kafka.ErrNoTopic) || !strings.Contains(err.Error(), cfg.Topic("nope")) {
		t.Errorf("NewReader with a missing topic: %v", err)
	}
	_, err = kadm.NewClient(adm).DeleteTopics(context.Background(), cfg.Topic("orders"))
	testenv.Must(t, err, "delete topic")
	_, err = r.ReadBack(context.Background(), base, base.Add(time.Hour), func(broker.Stored) error { return nil })
	if !errors.Is(err, kafka.ErrNoTopic) || !strings.Contains(err.Error(), cfg.Topic("orders")) {
		t.Errorf("ReadBack of a deleted topic: %v", err)
	}
	for _, bad := range []kafka.ReaderConfig{{Topics: []string{"orders"}}, {Config: cfg}, {Config: cfg, Topics: []string{""}}} {
		if _, err := kafka.NewReader(context.Background(), bad); err == nil || bad.Validate() == nil || err.Error() != bad.Validate().Error() {
			t.Errorf("NewReader(%+v): %v", bad, err)
		}
	}
}
