package relay_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/postgres"
	"github.com/courier-go/courier/store/sqlite"
)

// Environment of the relay child process (TestRelayChildProcess).
const (
	envChild      = "COURIER_TEST_RELAY_CHILD"
	envChildDB    = "COURIER_TEST_CHILD_DATABASE" // sqlite or postgres
	envChildDSN   = "COURIER_TEST_CHILD_DSN"      // the SQLite file or the PostgreSQL URL
	envChildNATS  = "COURIER_TEST_CHILD_NATS"
	envChildSubj  = "COURIER_TEST_CHILD_PREFIX"
	envChildCrash = "COURIER_TEST_CHILD_CRASH" // probability of dying between ack and mark
	envChildAcks  = "COURIER_TEST_CHILD_ACKS"  // file the child appends acknowledged ids to
)

// TestRelayChildProcess is not a test: it is the relay process that
// TestRelayKilledRepeatedly starts and kills. It does nothing unless run as
// that child.
func TestRelayChildProcess(t *testing.T) {
	if os.Getenv(envChild) != "1" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	st, notifier, err := childStore(ctx, os.Getenv(envChildDB), os.Getenv(envChildDSN))
	if err != nil {
		fatalChild(err)
	}
	nc, err := couriernats.Connect(os.Getenv(envChildNATS))
	if err != nil {
		fatalChild(err)
	}
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: couriernats.Config{SubjectPrefix: os.Getenv(envChildSubj)}})
	if err != nil {
		fatalChild(err)
	}
	acks, err := os.OpenFile(os.Getenv(envChildAcks), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fatalChild(err)
	}
	crash, _ := strconv.ParseFloat(os.Getenv(envChildCrash), 64)
	r, err := relay.New(st, &crashingPublisher{pub: pub, acks: acks, crash: crash}, relay.Config{
		LeaseDuration:  2 * time.Second,
		PublishTimeout: time.Second,
		Notifier:       notifier,
		PollInterval:   100 * time.Millisecond,
	})
	if err != nil {
		fatalChild(err)
	}
	if err := r.Run(ctx); err != nil {
		fatalChild(err)
	}
	os.Exit(0)
}

// childStore opens the relay child's store on the test's database. On
// SQLite the child has no wake-ups (the writers are in another process) and
// polls.
func childStore(ctx context.Context, db, dsn string) (store.RelayStore, store.Notifier, error) {
	if db == onSQLite.name {
		sdb, err := sqlite.Open(dsn)
		if err != nil {
			return nil, nil, err
		}
		st, err := sqlite.NewStore(ctx, sdb, sqlite.StoreConfig{})
		return st, nil, err
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, nil, err
	}
	st, err := postgres.NewStore(ctx, pool, postgres.StoreConfig{})
	if err != nil {
		return nil, nil, err
	}
	n, err := postgres.NewNotifier(dsn, nil)
	return st, n, err
}

func fatalChild(err error) {
	fmt.Fprintln(os.Stderr, "relay child:", err)
	os.Exit(3)
}

// crashingPublisher records every acknowledged message id, then sometimes
// kills its own process: after the broker's ack, before the relay marks the
// batch published.
type crashingPublisher struct {
	pub   *couriernats.Publisher
	mu    sync.Mutex
	acks  *os.File
	crash float64
}

func (p *crashingPublisher) Publish(ctx context.Context, msgs []courier.Message) []error {
	errs := p.pub.Publish(ctx, msgs)
	p.mu.Lock()
	defer p.mu.Unlock()
	w := bufio.NewWriter(p.acks)
	for i, err := range errs {
		if err == nil {
			fmt.Fprintln(w, msgs[i].ID)
		}
	}
	_ = w.Flush()
	if rand.Float64() < p.crash {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // never mark
	}
	return errs
}

func TestRelayKilledRepeatedly(t *testing.T) {
	onEachDatabase(t, testRelayKilledRepeatedly)
}

func testRelayKilledRepeatedly(t *testing.T, db database) {
	h := newHarness(t, db, anyNATS)
	n := 20000
	if testing.Short() {
		n = 3000
	}
	acks := filepath.Join(t.TempDir(), "acks")
	child := func(crash float64) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRelayChildProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), envChild+"=1", envChildDB+"="+db.name, envChildDSN+"="+h.dsn, envChildNATS+"="+h.natsURL,
			envChildSubj+"="+h.mapping.SubjectPrefix, envChildCrash+"="+strconv.FormatFloat(crash, 'f', -1, 64), envChildAcks+"="+acks)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		testenv.Must(t, cmd.Start(), "start relay child")
		return cmd
	}

	// Write the stream of messages at about 2,000/s while relays come and go.
	var written []courier.Message
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for done := 0; done < n; {
			k := min(1+rand.IntN(40), n-done)
			written = append(written, h.produce(k, 200, k)...)
			done += k
			time.Sleep(time.Duration(k) * 500 * time.Microsecond)
		}
	}()

	kills, selfKills := 0, 0
	for running := true; running; {
		select {
		case <-produced:
			running = false
		default:
		}
		cmd := child(0.15)
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case <-time.After(time.Duration(100+rand.IntN(400)) * time.Millisecond):
			_ = cmd.Process.Kill()
			<-exited
			kills++
		case <-exited: // it killed itself between ack and mark
			selfKills++
		}
	}
	// A last relay that is left alone drains what the others left behind,
	// including rows whose leases died with them, and exits cleanly on SIGTERM.
	cmd := child(0)
	h.waitDrained()
	testenv.Must(t, cmd.Process.Signal(syscall.SIGTERM), "sigterm")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("relay did not exit cleanly on SIGTERM: %v", err)
	}

	streamDups := checkDelivery(t, written, h.received())
	ackCount := map[string]int{}
	f, err := os.Open(acks)
	testenv.Must(t, err, "open acks")
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		ackCount[sc.Text()]++
	}
	republished := 0
	for _, c := range ackCount {
		republished += c - 1
	}
	if len(ackCount) != len(written) {
		t.Fatalf("%d distinct messages acknowledged, %d written", len(ackCount), len(written))
	}
	t.Logf("%d messages, relay SIGKILLed %d times from outside and %d times between ack and mark: "+
		"none lost; %d messages published more than once (%d extra publications), %d duplicates stored in the stream (JetStream deduplicates by message id)",
		len(written), kills, selfKills, countOver1(ackCount), republished, streamDups)
}

func countOver1(m map[string]int) (n int) {
	for _, c := range m {
		if c > 1 {
			n++
		}
	}
	return n
}
