package brokertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/internal/tcpproxy"
	"github.com/courier-go/courier/internal/testwait"
)

// sweepRun is one case of the pause sweep under way: its instances, the
// producer, the log of what was applied.
type sweepRun struct {
	t       *testing.T
	in      Instance
	c       sweepCase
	log     string
	proxies []*tcpproxy.Proxy // the cut instance's connections
	procs   []*instanceProc
	stop    chan struct{} // closed to stop the producer
	done    chan struct{} // closed when it stopped
	once    sync.Once

	mu        sync.Mutex
	round     int // rounds published (and acknowledged)
	slowRound int // the round whose first two messages are slow; 0: none
	read      int64
	got       appliedLog
	stopped   bool
}

// instanceProc is an instance of the consumer, a process of its own.
type instanceProc struct {
	name string
	cmd  *exec.Cmd
	out  *testwait.Buffer // its stderr
	done chan struct{}
}

// start starts an instance named name: this test binary again, which
// TestMain hands to Child.
func (r *sweepRun) start(p Process, name string) {
	c := child{Process: p, Name: name, Log: r.log, Work: sweepWork, Slow: r.c.d}
	raw, err := json.Marshal(c)
	testwait.Must(r.t, err, "describe the instance")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"="+string(raw))
	in := &instanceProc{name: name, cmd: cmd, out: &testwait.Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = io.Discard, in.out
	testwait.Must(r.t, cmd.Start(), "start instance "+name)
	go func() { _ = cmd.Wait(); close(in.done) }()
	r.procs = append(r.procs, in)
}

// produce publishes a round every sweepRound, one message of each key,
// its payload the round's number, until stopProducing; a round is
// acknowledged before the next, so the broker holds each key's messages in
// order.
func (r *sweepRun) produce() {
	defer close(r.done)
	tick := time.NewTicker(sweepRound)
	defer tick.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-tick.C:
		}
		r.mu.Lock()
		round, slow := r.round+1, r.slowRound
		r.mu.Unlock()
		msgs := make([]courier.Message, sweepKeys)
		for k := range msgs {
			payload := strconv.Itoa(round)
			if round == slow && k < 2 {
				payload += slowMark
			}
			msgs[k] = message(r.in, "key-"+strconv.Itoa(k), []byte(payload))
		}
		if !r.publish(round, msgs) {
			return
		}
		r.mu.Lock()
		r.round = round
		r.mu.Unlock()
	}
}

// publish publishes a round's messages, again those that failed with an
// outage (as a relay would: in order, until the broker takes them), and
// reports whether they all went.
func (r *sweepRun) publish(round int, msgs []courier.Message) bool {
	for len(msgs) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		errs := r.in.Publisher.Publish(ctx, msgs)
		cancel()
		var again []courier.Message
		for i, err := range errs {
			switch {
			case errors.Is(err, broker.ErrUnavailable):
				again = append(again, msgs[i])
			case err != nil:
				r.t.Errorf("publish round %d, key %s: %v", round, msgs[i].Key, err)
				return false
			}
		}
		if msgs = again; len(msgs) > 0 {
			select {
			case <-r.stop:
				return false
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return true
}

// stopProducing stops the producer and returns the rounds it published.
func (r *sweepRun) stopProducing() int {
	r.once.Do(func() { close(r.stop) })
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.round
}

// fault makes the case's fault, returns once it is over, and returns the
// rounds published by then.
func (r *sweepRun) fault() int {
	switch r.c.fault {
	case faultPause:
		p := r.procs[0].cmd.Process
		testwait.Must(r.t, p.Signal(syscall.SIGSTOP), "stop instance")
		time.Sleep(r.c.d) // the fault itself
		testwait.Must(r.t, p.Signal(syscall.SIGCONT), "continue instance")
	case faultCut:
		for _, p := range r.proxies {
			p.Freeze()
		}
		time.Sleep(r.c.d) // the fault itself
		for _, p := range r.proxies {
			p.Thaw()
		}
	case faultSlow:
		r.mu.Lock()
		r.slowRound = r.round + 1
		r.mu.Unlock()
		r.mu.Lock()
		slow := r.slowRound
		r.mu.Unlock()
		// An instance applying a slow message applies nothing else, and
		// both may: nothing may be applied for as long as one takes.
		testwait.WhileProgressing(r.t, 30*time.Second+r.c.d, func() (bool, any) {
			a := r.applied()
			return a.seen[applied{key: "key-0", round: slow}] && a.seen[applied{key: "key-1", round: slow}], a.total
		}, "the slow messages (round %d of key-0 and key-1) were not applied; the instances said:\n%s", slow, testwait.Lazy(r.output))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.round
}

// waitApplying waits until every instance has applied a message of a round
// after round: as long as one more does every three timeouts (at least
// 30s; taking partitions over takes one or two).
func (r *sweepRun) waitApplying(round int, when string) {
	r.t.Helper()
	testwait.WhileProgressing(r.t, max(30*time.Second, 3*r.c.timing.Timeout), func() (bool, any) {
		a, done := r.applied(), 0
		for _, p := range r.procs {
			if a.last[p.name] > round {
				done++
			}
		}
		return done == len(r.procs), done
	}, "%s, not every instance applied a message (the last round each applied: %v); the instances said:\n%s", when,
		testwait.Lazy(func() any { return r.applied().last }), testwait.Lazy(r.output))
}

// stopAll stops every instance (SIGCONT first: it may be stopped) with
// SIGTERM and waits for it; it may be called more than once.
func (r *sweepRun) stopAll() {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	r.stopped = true
	r.mu.Unlock()
	for _, p := range r.proxies {
		p.Thaw()
	}
	for _, p := range r.procs {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range r.procs {
		select {
		case <-p.done:
		case <-time.After(wait):
			_ = p.cmd.Process.Kill()
			<-p.done
			r.t.Errorf("instance %s did not stop within %s of SIGTERM", p.name, wait)
		}
	}
}

// output is what the instances wrote to their stderr.
func (r *sweepRun) output() any {
	var b strings.Builder
	for _, p := range r.procs {
		fmt.Fprintf(&b, "--- %s:\n%s\n", p.name, lastLines(p.out.String(), 30))
	}
	return b.String()
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// applied reads what the log gained since it last did and returns the
// whole of it.
func (r *sweepRun) applied() *appliedLog {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, err := os.Open(r.log)
	if err != nil {
		r.t.Errorf("read the log: %v", err)
		return &r.got
	}
	defer f.Close()
	data, err := io.ReadAll(io.NewSectionReader(f, r.read, 1<<40))
	if err != nil {
		r.t.Errorf("read the log: %v", err)
		return &r.got
	}
	complete := bytes.LastIndexByte(data, '\n') + 1 // a line being written stays for later
	r.read += int64(complete)
	for _, line := range strings.Split(string(data[:complete]), "\n") {
		if line != "" {
			r.got.add(r.t, line)
		}
	}
	return &r.got
}

// appliedLog is what the instances applied, in the order they did.
type appliedLog struct {
	entries  []applied
	seen     map[applied]bool // key and round
	total    int
	distinct int
	by       map[string]int // instance -> applied
	last     map[string]int // instance -> the latest round it applied
}

// applied is one application: of key's message of round, by instance.
type applied struct {
	instance, key string
	round         int
}

func (a *appliedLog) add(t *testing.T, line string) {
	f := strings.Fields(line)
	n, err := 0, error(nil)
	if len(f) == 3 {
		n, err = strconv.Atoi(f[2])
	}
	if len(f) != 3 || err != nil {
		t.Errorf("the log holds %q: not instance, key and round", line)
		return
	}
	if a.seen == nil {
		a.seen, a.by, a.last = map[applied]bool{}, map[string]int{}, map[string]int{}
	}
	e := applied{instance: f[0], key: f[1], round: n}
	a.entries = append(a.entries, e)
	a.total++
	a.by[e.instance]++
	a.last[e.instance] = max(a.last[e.instance], n)
	if k := (applied{key: e.key, round: n}); !a.seen[k] {
		a.seen[k] = true
		a.distinct++
	}
}

// check fails the test unless every message of the rounds published was
// applied, each key's for the first time in the order published, and
// logs what happened.
func (r *sweepRun) check(rounds int) {
	a := r.applied()
	next := map[string]int{} // key -> the round applied first next
	again, early := 0, 0
	for i, e := range a.entries {
		n := max(next[e.key], 1)
		switch {
		case e.round < n:
			again++
		case e.round == n:
			next[e.key] = n + 1
		default:
			if early < 5 {
				from := max(0, i-5)
				r.t.Errorf("key %s: round %d applied by %s before round %d; the log around it: %v", e.key, e.round, e.instance, n, a.entries[from:i+1])
			}
			early++
			next[e.key] = max(next[e.key], e.round+1) // go on from it
		}
	}
	lost := 0
	for k := range sweepKeys {
		lost += max(0, rounds-(max(next["key-"+strconv.Itoa(k)], 1)-1))
	}
	by := make([]string, 0, len(a.by))
	for name, n := range a.by {
		by = append(by, fmt.Sprintf("%s %d", name, n))
	}
	sort.Strings(by)
	r.t.Logf("%s: %d messages, %d applied out of order, %d not applied, %d applied again (%s)",
		r.c, rounds*sweepKeys, early, lost, again, strings.Join(by, ", "))
	if early != 0 || lost != 0 {
		r.t.Errorf("%d applied before an earlier message of their key, %d never applied", early, lost)
	}
}
