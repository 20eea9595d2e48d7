// Package chaos drives relays, consumers and a NATS server, each a process
// of its own, through crashes and outages while a producer writes, then
// checks that nothing was lost, applied twice or reordered. It does the same
// to the reference shop's four services (TestShopUnderProcessKills), then
// audits the shop's databases.
//
//	go test ./test/chaos                  # the short runs CI does (under a minute each)
//	go test ./test/chaos -run . -long     # 100,000 messages and 5,000 orders, minutes of chaos
//
// It needs PostgreSQL (COURIER_TEST_POSTGRES_URL); NATS runs embedded in a
// child process it can kill.
package chaos

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store/postgres"
)

var long = flag.Bool("long", false, "run the long chaos tests: 100,000 messages with 5 minutes of faults, 5,000 orders with 4")

func TestMain(m *testing.M) {
	runRole()
	flag.Parse()
	os.Exit(m.Run())
}

// settings of one run.
type settings struct {
	messages, keys, partitions, relays int
	chaosFor                           time.Duration
}

func (s settings) String() string {
	return fmt.Sprintf("%d messages over %d keys, %d relays, %d consumers, %s of faults",
		s.messages, s.keys, s.relays, s.partitions, s.chaosFor)
}

// proc is one supervised child process, restarted whenever it dies until
// the run stops it.
type proc struct {
	name    string
	env     []string
	stderr  *os.File // where its log goes; default os.Stderr
	mu      sync.Mutex
	cmd     *exec.Cmd
	hold    bool // do not restart for now
	peak    int64
	runs    int
	started time.Time
}

func (p *proc) start(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stderr = os.Stderr
	if p.stderr != nil {
		cmd.Stderr = p.stderr
	}
	if err := cmd.Start(); err != nil {
		t.Errorf("start %s: %v", p.name, err)
		return
	}
	p.cmd = cmd
	p.runs++
	p.started = time.Now()
}

func (p *proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

// sample records the process's resident set high-water mark.
func (p *proc) sample() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			if kb, _ := strconv.ParseInt(f[1], 10, 64); kb > p.peak {
				p.peak = kb
			}
		}
	}
}

// supervise keeps p running until stop is closed, then stops it with
// SIGTERM and reports an unclean exit.
func (p *proc) supervise(t *testing.T, stop <-chan struct{}, wg *sync.WaitGroup) {
	wg.Go(func() {
		for {
			p.mu.Lock()
			if !p.hold {
				p.start(t)
			}
			cmd := p.cmd
			p.mu.Unlock()
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
				time.Sleep(100 * time.Millisecond)
				for {
					p.mu.Lock()
					hold := p.hold
					p.mu.Unlock()
					if !hold {
						break
					}
					select {
					case <-stop:
						return
					case <-time.After(50 * time.Millisecond):
					}
				}
			case <-stop:
				_ = cmd.Process.Signal(syscall.SIGCONT)
				_ = cmd.Process.Signal(syscall.SIGTERM)
				p.mu.Lock()
				fresh := time.Since(p.started) < 2*time.Second // may not handle signals yet
				p.mu.Unlock()
				select {
				case err := <-done:
					if err != nil && !fresh {
						t.Errorf("%s did not stop cleanly on SIGTERM: %v", p.name, err)
					}
				case <-time.After(30 * time.Second):
					_ = cmd.Process.Kill()
					<-done
					t.Errorf("%s did not stop within 30s of SIGTERM", p.name)
				}
				return
			}
		}
	})
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err, "free port")
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestChaos(t *testing.T) {
	s := settings{messages: 5000, keys: 200, partitions: 2, relays: 2, chaosFor: 25 * time.Second}
	if *long {
		s = settings{messages: 100000, keys: 1000, partitions: 4, relays: 3, chaosFor: 5 * time.Minute}
	}
	t.Logf("chaos run: %s", s)
	ctx := context.Background()
	producer := testenv.Postgres(t, true)
	consumer := testenv.Postgres(t, true)
	_, err := consumer.Pool.Exec(ctx, `CREATE TABLE effects (n bigint GENERATED ALWAYS AS IDENTITY, message_id uuid NOT NULL, key text NOT NULL, seq int NOT NULL)`)
	testenv.Must(t, err, "effects table")

	port := freePort(t)
	natsURL := fmt.Sprintf("nats://127.0.0.1:%d", port)
	stream := testenv.Name("CHAOS")
	prefix := strings.ToLower(stream) + "."
	common := []string{envNATS + "=" + natsURL, envPrefix + "=" + prefix, envStream + "=" + stream}

	natsProc := &proc{name: "nats", env: []string{envRole + "=nats", envDir + "=" + filepath.Join(t.TempDir(), "nats"), envPort + "=" + strconv.Itoa(port)}}
	var relays, consumers []*proc
	for i := range s.relays {
		app := fmt.Sprintf("chaos_relay_%s_%d", producer.Schema, i)
		relays = append(relays, &proc{name: fmt.Sprintf("relay %d", i), env: append([]string{envRole + "=relay",
			envPG + "=" + producer.URL + "&application_name=" + app, envFail + "=0.02"}, common...)})
	}
	for i := range s.partitions {
		app := fmt.Sprintf("chaos_consumer_%s_%d", consumer.Schema, i)
		consumers = append(consumers, &proc{name: fmt.Sprintf("consumer %d", i), env: append([]string{envRole + "=consumer",
			envPG + "=" + consumer.URL + "&application_name=" + app, envTopic + "=" + fmt.Sprintf("part%d", i),
			envDup + "=0.02", envReorder + "=0.02"}, common...)})
	}
	all := append(append([]*proc{natsProc}, relays...), consumers...)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	natsProc.supervise(t, stop, &wg)
	time.Sleep(500 * time.Millisecond)
	for _, p := range all[1:] {
		p.supervise(t, stop, &wg)
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()

	// The producer writes at a pace that spreads the messages over the chaos.
	written := produce(t, producer.Pool, s)

	// Faults, at random, until the time is up.
	faults := map[string]int{}
	deadline := time.Now().Add(s.chaosFor)
	sampling := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-sampling:
				return
			case <-t.C:
				for _, p := range all {
					p.sample()
				}
			}
		}
	})
	stopSampling := sync.OnceFunc(func() { close(sampling); sampler.Wait() })
	defer stopSampling()
	for round := 0; time.Now().Before(deadline); round++ {
		action := rand.IntN(6)
		if round < 5 {
			action = round // every kind of fault at least once
		}
		time.Sleep(time.Duration(300+rand.IntN(1200)) * time.Millisecond)
		{
			switch action {
			case 0:
				relays[rand.IntN(len(relays))].signal(syscall.SIGKILL)
				faults["relay SIGKILL"]++
			case 1:
				consumers[rand.IntN(len(consumers))].signal(syscall.SIGKILL)
				faults["consumer SIGKILL"]++
			case 2:
				natsProc.mu.Lock()
				natsProc.hold = true
				natsProc.mu.Unlock()
				natsProc.signal(syscall.SIGKILL)
				time.Sleep(time.Duration(500+rand.IntN(2500)) * time.Millisecond)
				natsProc.mu.Lock()
				natsProc.hold = false
				natsProc.mu.Unlock()
				faults["NATS killed and restarted"]++
			case 3:
				var n int
				_ = producer.Admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE application_name LIKE 'chaos_%' AND (application_name LIKE '%'||$1||'%' OR application_name LIKE '%'||$2||'%')`,
					producer.Schema, consumer.Schema).Scan(&n)
				faults["PostgreSQL backends terminated"] += n
				faults["PostgreSQL terminations"]++
			case 4:
				r := relays[rand.IntN(len(relays))]
				r.signal(syscall.SIGSTOP)
				time.Sleep(4 * time.Second) // past its 3s lease
				r.signal(syscall.SIGCONT)
				faults["relay paused past its lease"]++
			case 5:
				// Breathing room: faults need quiet moments to be survived.
			}
		}
	}
	msgs := <-written
	t.Logf("faults: %v", faults)

	// Everything written must come out the other end, once, in key order.
	check(t, ctx, producer, consumer, msgs, s)
	close(stop)
	wg.Wait()
	stopSampling()
	for _, p := range all {
		t.Logf("%-12s %2d runs, peak RSS %6.1f MiB", p.name, p.runs, float64(p.peak)/1024)
	}
}

// written is one message as the producer committed it.
type written struct {
	id  string
	key string
	seq int
}

// produce writes s.messages messages, seq increasing per key, in small
// transactions, spread over s.chaosFor; the channel yields them when done.
func produce(t *testing.T, pool *pgxpool.Pool, s settings) <-chan []written {
	out := make(chan []written, 1)
	go func() {
		w := outbox.New(postgres.Pgx(), outbox.Config{})
		var all []written
		seq := map[string]int{}
		pace := s.chaosFor * 8 / 10 / time.Duration(s.messages/10)
		for len(all) < s.messages {
			n := min(10, s.messages-len(all))
			msgs := make([]courier.Message, n)
			batch := make([]written, n)
			for i := range msgs {
				k := fmt.Sprintf("k%d", rand.IntN(s.keys))
				seq[k]++
				part := int(fnv(k) % uint32(s.partitions))
				msgs[i] = courier.NewMessage(fmt.Sprintf("part%d", part), k, "Step", []byte(strconv.Itoa(seq[k])))
				batch[i] = written{id: msgs[i].ID.String(), key: k, seq: seq[k]}
			}
			err := func() error {
				ctx := context.Background()
				tx, err := pool.Begin(ctx)
				if err != nil {
					return err
				}
				defer tx.Rollback(ctx)
				if err := w.Write(ctx, tx, msgs...); err != nil {
					return err
				}
				return tx.Commit(ctx)
			}()
			if err != nil { // not written: take the sequence numbers back and retry
				for _, b := range batch {
					seq[b.key]--
				}
				time.Sleep(50 * time.Millisecond)
				continue
			}
			all = append(all, batch...)
			time.Sleep(pace)
		}
		out <- all
	}()
	return out
}

func fnv(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}
