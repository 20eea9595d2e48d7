package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/dburl"
	"github.com/courier-go/courier/tenant"
)

// fleetCounter counts what a fleet child's tenants do: their turns
// (sessions: database opens), claims, releases and messages marked
// published, and times each turn's first steps. One counter serves every
// tenant (Config.Observers and Config.Open).
type fleetCounter struct {
	relay.NopObserver
	opens, claims, empty, releases, published atomic.Int64
	// claimsCut and releasesCut count the calls cut short by their
	// context's end (a turn that ended under way); turnsClaimed the turns
	// whose first claim returned.
	claimsCut, releasesCut, turnsClaimed atomic.Int64

	mu    sync.Mutex
	turns []*turnTimes // the turns begun since the last snapshot
}

// turnTimes times one turn's first steps: opening the database (dburl.Open:
// connect and ping), its relay store (the schema's check), the relay's
// first release and first claim; zero while not done. The first claim's
// return is also timed from the open's start.
type turnTimes struct {
	began                          time.Time
	open, store, release, claim    time.Duration
	claimed                        time.Duration // from began to the first claim's return
	releaseCut, claimCut, anyClaim bool
}

// take returns the turns begun since the last call.
func (c *fleetCounter) take() []turnTimes {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]turnTimes, len(c.turns))
	for i, t := range c.turns {
		out[i] = *t
	}
	c.turns = nil
	return out
}

// Completed counts the messages marked published.
func (c *fleetCounter) Completed(published, _, _ int) { c.published.Add(int64(published)) }

// open is the fleet's Config.Open: dburl.Open, as the default, with the
// relay store counted.
func (c *fleetCounter) open(ctx context.Context, t tenant.Tenant, opts dburl.Options) (*dburl.DB, error) {
	tt := &turnTimes{began: time.Now()}
	d, err := dburl.Open(ctx, t.URL, opts)
	if err != nil {
		return nil, err
	}
	c.opens.Add(1)
	c.mu.Lock()
	tt.open = time.Since(tt.began)
	c.turns = append(c.turns, tt)
	c.mu.Unlock()
	d.Driver = countingDriver{Driver: d.Driver, c: c, tt: tt}
	return d, nil
}

// countingDriver is a tenant's driver whose relay store is counted.
type countingDriver struct {
	store.Driver[*sql.Tx]
	c  *fleetCounter
	tt *turnTimes
}

// RelayStore returns the driver's relay store, counted.
func (d countingDriver) RelayStore(ctx context.Context, cfg store.RelayConfig) (store.RelayStore, error) {
	t0 := time.Now()
	st, err := d.Driver.RelayStore(ctx, cfg)
	if err != nil {
		return nil, err
	}
	d.c.mu.Lock()
	d.tt.store = time.Since(t0)
	d.c.mu.Unlock()
	return countingStore{RelayStore: st, c: d.c, tt: d.tt}, nil
}

// countingStore counts a relay store's claims and releases, and times the
// turn's first of each.
type countingStore struct {
	store.RelayStore
	c  *fleetCounter
	tt *turnTimes
}

// Claim counts the claim, whether it found nothing or was cut short, and
// times the turn's first.
func (s countingStore) Claim(ctx context.Context, owner string, limit int, lease time.Duration) (store.Batch, error) {
	s.c.claims.Add(1)
	t0 := time.Now()
	b, err := s.RelayStore.Claim(ctx, owner, limit, lease)
	took := time.Since(t0)
	cut := err != nil && ctx.Err() != nil
	switch {
	case cut:
		s.c.claimsCut.Add(1)
	case err == nil && len(b.Records) == 0:
		s.c.empty.Add(1)
	}
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	if s.tt.anyClaim {
		return b, err
	}
	s.tt.anyClaim = true
	if cut {
		s.tt.claimCut = true
	} else if err == nil {
		s.tt.claim, s.tt.claimed = took, time.Since(s.tt.began)
		s.c.turnsClaimed.Add(1)
	}
	return b, err
}

// Release counts the release, whether it was cut short, and times the
// turn's first.
func (s countingStore) Release(ctx context.Context, limit int) (store.Released, error) {
	s.c.releases.Add(1)
	t0 := time.Now()
	r, err := s.RelayStore.Release(ctx, limit)
	took := time.Since(t0)
	cut := err != nil && ctx.Err() != nil
	if cut {
		s.c.releasesCut.Add(1)
	}
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	if s.tt.release == 0 && !s.tt.releaseCut {
		if cut {
			s.tt.releaseCut = true
		} else {
			s.tt.release = took
		}
	}
	return r, err
}

// turnStats summarises turns: how many, the p50 and p99 of each step among
// the turns that did it (ms), and how many turns' first release and first
// claim were cut short.
func turnStats(ts []turnTimes) turnSummary {
	var sum turnSummary
	sum.Turns = len(ts)
	pick := func(get func(turnTimes) time.Duration) [2]float64 {
		var v []float64
		for _, t := range ts {
			if d := get(t); d > 0 {
				v = append(v, float64(d)/float64(time.Millisecond))
			}
		}
		if len(v) == 0 {
			return [2]float64{}
		}
		slices.Sort(v)
		return [2]float64{quantile(v, 0.5), quantile(v, 0.99)}
	}
	sum.Open = pick(func(t turnTimes) time.Duration { return t.open })
	sum.Store = pick(func(t turnTimes) time.Duration { return t.store })
	sum.Release = pick(func(t turnTimes) time.Duration { return t.release })
	sum.Claim = pick(func(t turnTimes) time.Duration { return t.claim })
	sum.Claimed = pick(func(t turnTimes) time.Duration { return t.claimed })
	for _, t := range ts {
		if t.claimed > 0 {
			sum.ClaimedN++
		}
		if t.releaseCut {
			sum.ReleaseCut++
		}
		if t.claimCut {
			sum.ClaimCut++
		}
	}
	return sum
}

// childTenants is the fleet child's main: it makes a tenant.Fleet over
// the spec's tenants file, publishing to JetStream, says READY, runs it on
// "GO n" until n messages are marked published and reports, answers
// "SNAP" with its state, and stops the fleet when its stdin closes.
func childTenants(spec string) error {
	var s tenantsSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		return err
	}
	nc, err := couriernats.Connect(s.NATSURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: couriernats.Config{SubjectPrefix: s.Prefix}})
	if err != nil {
		return err
	}
	c := &fleetCounter{}
	f, err := tenant.New(pub, tenant.Config{
		Source:    tenant.File(s.TenantsFile),
		MaxOpen:   s.MaxOpen,
		Observers: func(string) relay.Observer { return c },
		Open:      c.open,
		Logger:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	snap := func() fleetSnap {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		rss, hwm := procStatus()
		sn := fleetSnap{At: time.Now(), CPU: rusageCPU(&ru), RSS: rss, HWM: hwm, HeapInuse: ms.HeapInuse, Goroutines: runtime.NumGoroutine(),
			Claims: c.claims.Load(), Empty: c.empty.Load(), Releases: c.releases.Load(), Opens: c.opens.Load(),
			Published: c.published.Load(), Open: f.Status().Open, ClaimsCut: c.claimsCut.Load(), ReleasesCut: c.releasesCut.Load(),
			TurnsClaimed: c.turnsClaimed.Load(), Since: turnStats(c.take())}
		return sn
	}
	say := func(v any) {
		out, _ := json.Marshal(v)
		fmt.Println(string(out))
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var done chan error
	in := bufio.NewReader(os.Stdin)
	fmt.Println(lineReady)
	for {
		l, err := in.ReadString('\n')
		if err != nil { // stdin closed: stop
			break
		}
		cmd, arg, _ := strings.Cut(strings.TrimSpace(l), " ")
		switch cmd {
		case lineGo:
			n, err := strconv.ParseInt(arg, 10, 64)
			if err != nil || done != nil {
				say(fleetDrain{Snap: fleetSnap{Error: fmt.Sprintf("bad %q", l)}})
				continue
			}
			s0 := snap()
			done = make(chan error, 1)
			go func() { done <- f.Run(ctx) }()
			err = waitFor(ctx, s.DrainTimeout, time.Millisecond, func() (bool, error) {
				select {
				case err := <-done:
					done <- err
					return false, fmt.Errorf("the fleet stopped: %v", err)
				default:
				}
				return c.published.Load() >= n, nil
			})
			s1 := snap()
			d := fleetDrain{Elapsed: s1.At.Sub(s0.At), CPU: s1.CPU - s0.CPU, Snap: s1}
			if err != nil {
				d.Snap.Error = fmt.Sprintf("after %d of %d messages: %v", c.published.Load(), n, err)
				dumpStatus(f.Status())
			}
			say(d)
		case lineSnap:
			say(snap())
		default:
			say(fleetSnap{Error: fmt.Sprintf("unknown command %q", l)})
		}
	}
	cancel()
	if done != nil {
		return <-done
	}
	return nil
}

// dumpStatus writes the fleet's state to stderr, for a drain that
// stalled: how many tenants are open, and each tenant that has published
// nothing or last failed (at most 5 of them).
func dumpStatus(st tenant.Status) {
	fmt.Fprintf(os.Stderr, "fleet status: %d tenants, %d open, source error %q\n", st.Tenants, st.Open, st.SourceError)
	shown := 0
	for _, t := range st.Served {
		if t.Metrics.Published > 0 && t.Error == "" {
			continue
		}
		if shown++; shown > 5 {
			break
		}
		b, _ := json.Marshal(t)
		fmt.Fprintf(os.Stderr, "  %s\n", b)
	}
}

// procStatus returns this process's resident set size and its peak
// (VmRSS, VmHWM from /proc/self/status), in bytes; 0 when unreadable.
func procStatus() (rss, hwm int64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	kb := func(v string) int64 {
		var n int64
		_, _ = fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &n)
		return n << 10
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			rss = kb(v)
		}
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			hwm = kb(v)
		}
	}
	return rss, hwm
}

// tenantsSpec is what the parent tells a fleet child.
type tenantsSpec struct {
	// TenantsFile lists the tenants (tenant.File).
	TenantsFile string `json:"tenants_file"`
	// NATSURL and Prefix: the publisher's server and subject prefix.
	NATSURL string `json:"nats_url"`
	Prefix  string `json:"prefix"`
	// MaxOpen is the fleet's Config.MaxOpen.
	MaxOpen int `json:"max_open"`
	// DrainTimeout bounds a drain.
	DrainTimeout time.Duration `json:"drain_timeout"`
}

// fleetSnap is a fleet child's state at one moment.
type fleetSnap struct {
	At time.Time `json:"at"`
	// CPU is the child's user+sys time so far.
	CPU time.Duration `json:"cpu"`
	// RSS and HWM are the child's resident set size and its peak, bytes.
	RSS int64 `json:"rss"`
	HWM int64 `json:"hwm"`
	// HeapInuse is the Go heap in use, bytes; Goroutines the count.
	HeapInuse  uint64 `json:"heap_inuse"`
	Goroutines int    `json:"goroutines"`
	// Claims (Empty of them found nothing), Releases and Opens (tenant
	// sessions: database opens) count the fleet's calls so far; Published
	// the messages marked published.
	Claims    int64 `json:"claims"`
	Empty     int64 `json:"empty"`
	Releases  int64 `json:"releases"`
	Opens     int64 `json:"opens"`
	Published int64 `json:"published"`
	// Open is Status().Open: the tenants open now.
	Open int `json:"open"`
	// ClaimsCut and ReleasesCut count the calls a turn's end cut short;
	// TurnsClaimed the sessions whose first claim returned.
	ClaimsCut    int64 `json:"claims_cut"`
	ReleasesCut  int64 `json:"releases_cut"`
	TurnsClaimed int64 `json:"turns_claimed"`
	// Since summarises the turns begun since the previous snapshot.
	Since turnSummary `json:"since"`
	// Error is set when the child failed.
	Error string `json:"error,omitempty"`
}

// turnSummary summarises turns (see turnStats): each step's p50 and p99
// in ms among the turns that did it.
type turnSummary struct {
	Turns      int        `json:"turns"`
	Open       [2]float64 `json:"open"`
	Store      [2]float64 `json:"store"`
	Release    [2]float64 `json:"release"`
	Claim      [2]float64 `json:"claim"`
	Claimed    [2]float64 `json:"claimed"` // the first claim's return, from the open's start
	ClaimedN   int        `json:"claimed_n"`
	ReleaseCut int        `json:"release_cut"`
	ClaimCut   int        `json:"claim_cut"`
}

// String describes the turns for the log.
func (t turnSummary) String() string {
	return fmt.Sprintf("%d turns, %d with a first claim returned %.0f ms (p50) / %.0f ms (p99) after the open began; p50/p99 of open %.0f/%.0f ms, schema check %.0f/%.0f, first release %.0f/%.0f, first claim %.0f/%.0f; first release cut short in %d, first claim in %d",
		t.Turns, t.ClaimedN, t.Claimed[0], t.Claimed[1], t.Open[0], t.Open[1], t.Store[0], t.Store[1], t.Release[0], t.Release[1], t.Claim[0], t.Claim[1], t.ReleaseCut, t.ClaimCut)
}

// fleetDrain is a fleet child's report of a drain.
type fleetDrain struct {
	Elapsed time.Duration `json:"elapsed"`
	CPU     time.Duration `json:"cpu"`
	Snap    fleetSnap     `json:"snap"`
}

// fleetChild is a running fleet child: the bench binary re-executed with
// -role tenants.
type fleetChild struct {
	spec  tenantsSpec
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	once  sync.Once
}

// Fleet child protocol: READY when it made its fleet; "GO n" runs it until
// n messages are marked published, then reports a fleetDrain; "SNAP"
// reports a fleetSnap; the end of its stdin stops the fleet.
const (
	lineSnap = "SNAP"
)

// startFleetChild starts a fleet child and waits until it is ready.
func startFleetChild(ctx context.Context, spec tenantsSpec) (*fleetChild, error) {
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	c := &fleetChild{cmd: exec.Command(exe, "-role", "tenants", "-spec", string(specJSON)), spec: spec, lines: make(chan string)}
	c.cmd.Stderr = os.Stderr
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	if l, err := c.next(ctx, time.Minute); err != nil || l != lineReady {
		c.stop()
		return nil, fmt.Errorf("fleet child not ready: %q %v", l, err)
	}
	return c, nil
}

// next reads the child's next line.
func (c *fleetChild) next(ctx context.Context, timeout time.Duration) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case l, ok := <-c.lines:
		if !ok {
			return "", errors.New("fleet child exited early")
		}
		return l, nil
	case <-t.C:
		return "", fmt.Errorf("fleet child silent for %s", timeout)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// ask sends a command and decodes the answer into v.
func (c *fleetChild) ask(ctx context.Context, cmd string, timeout time.Duration, v any) error {
	if _, err := io.WriteString(c.stdin, cmd+"\n"); err != nil {
		return err
	}
	l, err := c.next(ctx, timeout)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(l), v); err != nil {
		return fmt.Errorf("fleet child said %q: %w", l, err)
	}
	return nil
}

// drain runs the fleet until n messages are marked published.
func (c *fleetChild) drain(ctx context.Context, n int) (fleetDrain, error) {
	var d fleetDrain
	if err := c.ask(ctx, fmt.Sprintf("%s %d", lineGo, n), c.spec.DrainTimeout+time.Minute, &d); err != nil {
		return fleetDrain{}, err
	}
	if d.Snap.Error != "" {
		return d, fmt.Errorf("fleet child: %s", d.Snap.Error)
	}
	return d, nil
}

// snap reads the child's state.
func (c *fleetChild) snap(ctx context.Context) (fleetSnap, error) {
	var s fleetSnap
	if err := c.ask(ctx, lineSnap, time.Minute, &s); err != nil {
		return s, err
	}
	if s.Error != "" {
		return s, fmt.Errorf("fleet child: %s", s.Error)
	}
	return s, nil
}

// stop closes the child's stdin (it stops its fleet and exits) and waits,
// killing it after 30 s.
func (c *fleetChild) stop() {
	c.once.Do(func() {
		_ = c.stdin.Close()
		exited := make(chan struct{})
		go func() {
			for range c.lines { // let the reader finish
			}
			_ = c.cmd.Wait()
			close(exited)
		}()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = c.cmd.Process.Kill()
			<-exited
		}
	})
}
