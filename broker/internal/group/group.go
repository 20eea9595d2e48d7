package group

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The defaults of Config's zero fields.
const (
	DefaultHeartbeat = time.Second
	DefaultTimeout   = 5 * time.Second
)

// releaseTimeout bounds the releases when the group stops.
const releaseTimeout = 5 * time.Second

// ErrBusy is wrapped by an Owner's Acquire when another member still holds
// the partition: the group tries again at the next heartbeat.
var ErrBusy = errors.New("partition held by another member")

// Owner consumes the partitions the group gives this member.
type Owner interface {
	// Acquire starts consuming partition p, unless it does already (and
	// still may: an Owner that lost p takes it again). It must not wait
	// for another member to let go of p: it returns an error wrapping
	// ErrBusy instead, and is asked again. alive reports whether a member
	// is alive in this member's view, so that an Owner may take p from a
	// member that is gone.
	Acquire(ctx context.Context, p int, alive func(member string) bool) error
	// Release stops consuming partition p, if it does, so that what it
	// has not acknowledged goes back to the broker for p's next owner.
	// With drain, it first waits (a while) for the deliveries handed out
	// to be settled, so that the next owner gets none of them again: the
	// group drains when it hands a partition to another member alive, not
	// when it stops (what the consumer did not settle by then, it will
	// not) nor after a gap in its run (the partition was taken meanwhile).
	// Without drain, an Owner whose acknowledgements are not answered
	// still waits for the broker to have those of the deliveries already
	// settled. The group releases several partitions at once, each in a
	// call of its own.
	Release(ctx context.Context, p int, drain bool)
}

// Config describes a member of a group. Zero fields take the defaults
// given.
type Config struct {
	// Name is the group's name, for logs.
	Name string
	// Member is this member's id. Default: NewMember().
	Member string
	// Partitions is how many partitions the group shares. Required.
	Partitions int
	// Heartbeat is how often the member announces itself. Default
	// DefaultHeartbeat (1s).
	Heartbeat time.Duration
	// Timeout is how long a member unheard of stays in the group: its
	// partitions move this long after it died or froze. At least twice
	// Heartbeat. Default DefaultTimeout (5s).
	Timeout time.Duration
	// Logger receives the group's logs. Default: discard.
	Logger *slog.Logger
}

// Check returns an error naming the field (prefixed with what, such as
// "nats: SubscriberConfig") when c, its defaults taken, is invalid.
func (c Config) Check(what string) error {
	c.setDefaults()
	switch {
	case c.Partitions < 1 || c.Partitions > MaxPartitions:
		return fmt.Errorf("%s.Partitions is %d: use 1 to %d (16 is a good start: at least the most instances you will run)", what, c.Partitions, MaxPartitions)
	case c.Heartbeat < 0 || c.Timeout < 0:
		return fmt.Errorf("%s: MemberHeartbeat %s and MemberTimeout %s: use more than 0, or 0 for %s and %s", what, c.Heartbeat, c.Timeout, DefaultHeartbeat, DefaultTimeout)
	case c.Timeout < 2*c.Heartbeat:
		return fmt.Errorf("%s.MemberTimeout is %s: make it at least twice MemberHeartbeat (%s), or a member that is late once looks gone", what, c.Timeout, c.Heartbeat)
	case !ValidMember(c.Member):
		return fmt.Errorf("%s: member id %q: use 1 to %d of a-z, 0-9 and -", what, c.Member, maxMember)
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.Member == "" {
		c.Member = NewMember()
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Group is one member's side of a group: it announces the member, keeps
// the view of who is alive and makes the Owner consume this member's share
// of the partitions. Create it with New, feed it what the Beacon hears
// with Heard, and start it with Run.
type Group struct {
	cfg   Config
	send  func(context.Context, Beat) error
	owner Owner
	log   *slog.Logger

	mu      sync.Mutex
	seen    map[string]time.Time // members heard from, with when last (not this one)
	odd     map[string]bool      // members that disagree about the partitions, warned of
	changed chan struct{}        // a member came or went
	owned   []int                // what this member consumes
	echo    time.Time            // when this member last heard its own beat
}

// New returns the group member cfg describes, which announces itself with
// send (the Beacon) and consumes through owner. It fails when cfg is
// invalid (see Config.Check).
func New(cfg Config, send func(context.Context, Beat) error, owner Owner) (*Group, error) {
	if err := cfg.Check("group: Config"); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	return &Group{
		cfg: cfg, send: send, owner: owner,
		log:  cfg.Logger.With("group", cfg.Name, "member", cfg.Member),
		seen: make(map[string]time.Time), odd: make(map[string]bool),
		changed: make(chan struct{}, 1),
	}, nil
}

// Member returns this member's id.
func (g *Group) Member() string { return g.cfg.Member }

// Heard records a beat the Beacon heard, as it came over the wire; what is
// not a beat is logged and dropped.
func (g *Group) Heard(data []byte) {
	b, err := ParseBeat(data)
	if err != nil {
		g.log.Warn("group: ignoring a message on the group's channel", "error", err)
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if b.Member == g.cfg.Member {
		g.echo = time.Now()
		return
	}
	if b.Partitions != g.cfg.Partitions {
		if !g.odd[b.Member] {
			g.odd[b.Member] = true
			g.log.Error("group: a member shares the keys over another number of partitions; ignoring it until it agrees",
				"other", b.Member, "its_partitions", b.Partitions, "partitions", g.cfg.Partitions)
		}
		return
	}
	_, known := g.seen[b.Member]
	if b.Leaving {
		delete(g.seen, b.Member)
	} else {
		g.seen[b.Member] = time.Now()
	}
	if known == b.Leaving {
		g.signal()
	}
}

func (g *Group) signal() {
	select {
	case g.changed <- struct{}{}:
	default:
	}
}

// Members returns the members alive in this member's view, this one
// included, sorted.
func (g *Group) Members() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.membersLocked()
}

func (g *Group) membersLocked() []string {
	ms := []string{g.cfg.Member}
	for m := range g.seen {
		ms = append(ms, m)
	}
	slices.Sort(ms)
	return ms
}

// Owned returns the partitions this member consumes, sorted.
func (g *Group) Owned() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.owned)
}

// alive reports whether member is alive in this member's view.
func (g *Group) alive(member string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.seen[member]
	return ok || member == g.cfg.Member
}

// expire forgets the members gone silent, and reports whether there were
// any. A member is gone once this one has heard its own beat Timeout after
// the other's last: the channel worked all along, and the other said
// nothing. While this member hears nothing, itself included (cut off from
// the broker, or the broker is slow), the others' silence says nothing
// about them, and it forgets none.
func (g *Group) expire() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	gone := false
	for m, at := range g.seen {
		if silent := g.echo.Sub(at); silent >= g.cfg.Timeout {
			delete(g.seen, m)
			gone = true
			g.log.Info("group: member gone silent", "other", m, "silent_for", silent.Round(time.Millisecond))
		}
	}
	return gone
}

// Run announces the member until ctx ends and keeps the Owner consuming
// its share of the partitions. It listens for two heartbeats before it
// takes any, to hear the others first. When ctx ends it releases every
// partition, announces that it leaves, and returns nil.
func (g *Group) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	beatCtx, stopBeats := context.WithCancel(ctx)
	defer stopBeats()
	wg.Go(func() { g.announce(beatCtx) })

	settle := time.NewTimer(2 * g.cfg.Heartbeat)
	select {
	case <-settle.C:
	case <-ctx.Done():
		settle.Stop()
		g.leave()
		return nil
	}
	var paused atomic.Int64 // a gap the watch saw, not yet resumed from
	wg.Go(func() { g.watch(beatCtx, &paused) })
	tick := time.NewTicker(g.cfg.Heartbeat)
	defer tick.Stop()
	for {
		if gap := time.Duration(paused.Swap(0)); gap > 0 {
			g.resume(ctx, gap)
		}
		g.expire()
		g.rebalance(ctx)
		select {
		case <-ctx.Done():
			stopBeats()
			wg.Wait()
			g.leave()
			return nil
		case <-tick.C:
		case <-g.changed:
		}
	}
}

// watch notices when this member did not run for Timeout or longer: it
// wakes every watchTick, and records a gap of at least Timeout between two
// wakes in paused, for Run, which it wakes. It runs beside Run's loop, so
// that the loop's own waits (a release that waits for deliveries to be
// settled, a slow broker) never count as a gap, and a gap during them
// still does.
func (g *Group) watch(ctx context.Context, paused *atomic.Int64) {
	t := time.NewTicker(watchTick(g.cfg))
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			now := time.Now()
			if gap := now.Sub(last); gap >= g.cfg.Timeout {
				paused.Store(int64(gap))
				g.signal()
			}
			last = now
		}
	}
}

// watchTick is how often watch wakes: a quarter of Heartbeat.
func watchTick(c Config) time.Duration { return max(c.Heartbeat/4, time.Millisecond) }

// resume picks up after this member did not run for gap, Timeout or
// longer (its process was stopped, starved or suspended): the others took
// its partitions meanwhile, and what it heard of them is as old as the
// gap, though they may well be alive. It gives up every partition it
// held, and counts the members it knew as heard from now, so that it does
// not take their partitions before it hears from them again.
func (g *Group) resume(ctx context.Context, gap time.Duration) {
	g.log.Warn("group: this member did not run for a while; giving up its partitions to take its share again", "gap", gap.Round(time.Millisecond))
	g.release(ctx, g.Owned(), false)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.owned = nil
	now := time.Now()
	for m := range g.seen {
		g.seen[m] = now
	}
	g.echo = time.Time{} // deaf until it hears itself again
}

// announce sends a beat every Heartbeat until ctx ends.
func (g *Group) announce(ctx context.Context) {
	t := time.NewTicker(g.cfg.Heartbeat)
	defer t.Stop()
	for {
		sctx, cancel := context.WithTimeout(ctx, g.cfg.Heartbeat)
		if err := g.send(sctx, Beat{Member: g.cfg.Member, Partitions: g.cfg.Partitions}); err != nil && ctx.Err() == nil {
			g.log.Warn("group: could not announce this member", "error", err)
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// rebalance releases what is no longer this member's share, then
// acquires what is.
func (g *Group) rebalance(ctx context.Context) {
	members := g.Members()
	mine := Assign(members, g.cfg.Partitions)[g.cfg.Member]
	owned := g.Owned()
	var leaving []int
	for _, p := range owned {
		if !slices.Contains(mine, p) {
			leaving = append(leaving, p)
		}
	}
	g.release(ctx, leaving, true)
	var got []int
	for _, p := range mine {
		err := g.owner.Acquire(ctx, p, g.alive)
		switch {
		case err == nil:
			got = append(got, p)
		case errors.Is(err, ErrBusy):
			g.log.Debug("group: partition still held by another member", "partition", p, "error", err)
		case ctx.Err() == nil:
			g.log.Warn("group: could not take a partition; trying again", "partition", p, "error", err)
		}
	}
	g.mu.Lock()
	g.owned = got
	g.mu.Unlock()
	if !slices.Equal(got, owned) {
		g.log.Info("group: partitions consumed", "members", members, "partitions", got, "wanted", mine)
	}
}

// leave releases every partition and says so to the others.
func (g *Group) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	g.release(ctx, g.Owned(), false)
	g.mu.Lock()
	g.owned = nil
	g.mu.Unlock()
	ctx, cancel = context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := g.send(ctx, Beat{Member: g.cfg.Member, Partitions: g.cfg.Partitions, Leaving: true}); err != nil {
		g.log.Warn("group: could not say this member leaves; the others notice after MemberTimeout", "error", err)
	}
}

// release releases the partitions ps at once, draining them or not, and
// returns when every release has.
func (g *Group) release(ctx context.Context, ps []int, drain bool) {
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() { g.owner.Release(ctx, p, drain) })
	}
	wg.Wait()
}
