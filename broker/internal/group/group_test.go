package group

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestAssignBalancedAndComplete(t *testing.T) {
	for _, tc := range []struct{ members, partitions int }{{1, 16}, {3, 16}, {4, 16}, {5, 7}, {16, 16}, {20, 16}, {7, 1000}} {
		var members []string
		for i := range tc.members {
			members = append(members, fmt.Sprintf("m%d", i))
		}
		got := Assign(members, tc.partitions)
		var all []int
		for _, m := range members {
			n := len(got[m])
			if n < tc.partitions/tc.members || n > (tc.partitions+tc.members-1)/tc.members {
				t.Errorf("%d members, %d partitions: %s has %d", tc.members, tc.partitions, m, n)
			}
			all = append(all, got[m]...)
		}
		slices.Sort(all)
		for p := range tc.partitions {
			if p >= len(all) || all[p] != p {
				t.Fatalf("%d members, %d partitions: partitions owned %v, want each of 0..%d once", tc.members, tc.partitions, all, tc.partitions-1)
			}
		}
		// The same members in another order, with a duplicate: the same
		// answer.
		again := Assign(append([]string{members[len(members)-1]}, members...), tc.partitions)
		for _, m := range members {
			if !slices.Equal(got[m], again[m]) {
				t.Fatalf("%s: %v, then %v for the same members", m, got[m], again[m])
			}
		}
	}
	if len(Assign(nil, 16)) != 0 || len(Assign([]string{"a"}, 0)) != 0 {
		t.Fatal("no members or no partitions: want no assignment")
	}
}

// A member joining takes its share mostly from the others' surplus: few
// partitions move between members that stay.
func TestAssignMovesLittle(t *testing.T) {
	const partitions = 64
	members := []string{"a", "b", "c"}
	before := Assign(members, partitions)
	after := Assign(append(members, "d"), partitions)
	moved := 0
	for _, m := range members {
		for _, p := range after[m] {
			if !slices.Contains(before[m], p) {
				moved++
			}
		}
	}
	if moved > partitions/8 {
		t.Fatalf("%d partitions moved between members that stayed when d joined; want few (d takes %d)", moved, len(after["d"]))
	}
}

func TestBeatRoundTrip(t *testing.T) {
	for _, b := range []Beat{{Member: "web-1-2-ab", Partitions: 16}, {Member: "x", Partitions: 1, Leaving: true}} {
		got, err := ParseBeat(b.Marshal())
		if err != nil || got != b {
			t.Fatalf("ParseBeat(%q) = %+v, %v; want %+v", b.Marshal(), got, err, b)
		}
	}
	for _, bad := range []string{"", "hello", "courier-group/1 alive 16", "courier-group/2 alive 16 a", "courier-group/1 dead 16 a",
		"courier-group/1 alive 0 a", "courier-group/1 alive x a", "courier-group/1 alive 16 A", "courier-group/1 alive 16 a b"} {
		if _, err := ParseBeat([]byte(bad)); err == nil {
			t.Errorf("ParseBeat(%q): no error", bad)
		}
	}
	if id := NewMember(); !ValidMember(id) {
		t.Fatalf("NewMember() = %q: not a valid member id", id)
	}
}

func FuzzParseBeat(f *testing.F) {
	f.Add([]byte("courier-group/1 alive 16 web-1-2-ab"))
	f.Add([]byte("courier-group/1 leaving 4096 a"))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := ParseBeat(data)
		if err != nil {
			return
		}
		again, err := ParseBeat(b.Marshal())
		if err != nil || again != b {
			t.Fatalf("%q parsed as %+v, which reads back as %+v, %v", data, b, again, err)
		}
	})
}

func TestConfigCheck(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "x.Partitions is 0: use 1 to 4096"},
		{Config{Partitions: 4097}, "x.Partitions is 4097"},
		{Config{Partitions: 4, Heartbeat: time.Second, Timeout: time.Second}, "x.MemberTimeout is 1s: make it at least twice MemberHeartbeat (1s)"},
		{Config{Partitions: 4, Heartbeat: -1}, "x: MemberHeartbeat -1ns"},
		{Config{Partitions: 4, Member: "Bad Id"}, `x: member id "Bad Id"`},
	} {
		err := tc.cfg.Check("x")
		if err == nil || len(err.Error()) < len(tc.want) || err.Error()[:len(tc.want)] != tc.want {
			t.Errorf("%+v: %v; want %q…", tc.cfg, err, tc.want)
		}
	}
	if err := (Config{Partitions: 16}).Check("x"); err != nil {
		t.Fatal(err)
	}
}

// broker is a fake broker's side of a group: a channel every member hears,
// and partitions each held by one member at a time.
type broker struct {
	mu      sync.Mutex
	groups  map[string]*Group
	mute    map[string]bool          // members whose beats nobody hears
	sent    map[string]time.Time     // member -> when its latest beat heard began to be delivered
	deaf    map[string]bool          // members that hear nothing, not even themselves
	holders map[int]string           // partition -> member consuming it
	taken   map[int][]string         // partition -> members that took it, in order
	busy    map[string]int           // member -> acquisitions refused
	slow    map[string]time.Duration // member -> how long its releases that drain take
	dropped map[string]int           // member -> partitions it released without draining
	asked   map[string]int           // member -> its calls of Acquire
}

func newBroker() *broker {
	return &broker{groups: map[string]*Group{}, mute: map[string]bool{}, sent: map[string]time.Time{}, deaf: map[string]bool{}, holders: map[int]string{}, taken: map[int][]string{}, busy: map[string]int{},
		slow: map[string]time.Duration{}, dropped: map[string]int{}, asked: map[string]int{}}
}

func (b *broker) send(_ context.Context, beat Beat) error {
	b.mu.Lock()
	if b.mute[beat.Member] {
		b.mu.Unlock()
		return nil
	}
	b.sent[beat.Member] = time.Now() // no one hears it sooner
	gs := make([]*Group, 0, len(b.groups))
	for m, g := range b.groups {
		if !b.deaf[m] {
			gs = append(gs, g)
		}
	}
	b.mu.Unlock()
	for _, g := range gs {
		g.Heard(beat.Marshal())
	}
	return nil
}

type owner struct {
	b      *broker
	member string
}

func (o owner) Acquire(_ context.Context, p int, alive func(string) bool) error {
	o.b.mu.Lock()
	defer o.b.mu.Unlock()
	o.b.asked[o.member]++
	switch h, held := o.b.holders[p]; {
	case h == o.member:
		return nil
	case held && alive(h):
		o.b.busy[o.member]++
		return fmt.Errorf("partition %d: %w (%s)", p, ErrBusy, h)
	}
	o.b.holders[p] = o.member
	o.b.taken[p] = append(o.b.taken[p], o.member)
	return nil
}

func (o owner) Release(_ context.Context, p int, drain bool) {
	o.b.mu.Lock()
	slow := o.b.slow[o.member]
	if !drain {
		o.b.dropped[o.member]++
	}
	o.b.mu.Unlock()
	if drain {
		time.Sleep(slow) // its deliveries take that long to settle
	}
	o.b.mu.Lock()
	defer o.b.mu.Unlock()
	if o.b.holders[p] == o.member {
		delete(o.b.holders, p)
	}
}

// start runs a member of the fake broker's group until the returned stop.
func (b *broker) start(t *testing.T, member string, partitions int) (stop func()) {
	g, err := New(Config{Name: "test", Member: member, Partitions: partitions, Heartbeat: 20 * time.Millisecond, Timeout: 100 * time.Millisecond}, b.send, owner{b, member})
	if err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	b.groups[member] = g
	b.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			b.mu.Lock()
			delete(b.groups, member)
			b.mu.Unlock()
		})
	}
	t.Cleanup(stop)
	return stop
}

// settled waits until the partitions are held as Assign shares them among
// members.
func (b *broker) settled(t *testing.T, members []string, partitions int) {
	t.Helper()
	want := Assign(members, partitions)
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.mu.Lock()
		ok := len(b.holders) == partitions
		for m, ps := range want {
			for _, p := range ps {
				ok = ok && b.holders[p] == m
			}
		}
		holders := fmt.Sprint(b.holders)
		b.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("partitions held %s; want %v", holders, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestMembersShareAndMove(t *testing.T) {
	const partitions = 12
	b := newBroker()
	stopA := b.start(t, "a", partitions)
	b.settled(t, []string{"a"}, partitions)
	b.start(t, "b", partitions)
	b.start(t, "c", partitions)
	b.settled(t, []string{"a", "b", "c"}, partitions)

	// A member that leaves says so: the others take its share at once.
	stopA()
	b.settled(t, []string{"b", "c"}, partitions)

	// A member that falls silent without letting go (cut off, frozen) is
	// gone after the timeout, and its partitions are taken from it; it
	// cannot take them back while the others are alive in its view.
	b.start(t, "d", partitions)
	b.settled(t, []string{"b", "c", "d"}, partitions)
	b.mu.Lock()
	b.mute["d"] = true
	last := b.sent["d"] // the others heard d last no sooner than this
	b.mu.Unlock()
	b.settled(t, []string{"b", "c"}, partitions)
	if took := time.Since(last); took < 100*time.Millisecond {
		t.Fatalf("a silent member's partitions moved %s after its last beat was heard; want after its timeout (100ms)", took)
	}
}

// A member that shares the keys over another number of partitions is
// ignored, not counted.
func TestDisagreeingMemberIgnored(t *testing.T) {
	b := newBroker()
	b.start(t, "a", 8)
	b.start(t, "z", 9)
	heard := func(g *Group, other string) func() bool {
		return func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.odd[other] }
	}
	for _, pair := range [][2]string{{"a", "z"}, {"z", "a"}} {
		for deadline := time.Now().Add(10 * time.Second); !heard(b.groups[pair[0]], pair[1])(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s never heard %s", pair[0], pair[1])
			}
		}
	}
	if ms := b.groups["a"].Members(); !slices.Equal(ms, []string{"a"}) {
		t.Fatalf("a's members: %v; want only itself", ms)
	}
	if ms := b.groups["z"].Members(); !slices.Equal(ms, []string{"z"}) {
		t.Fatalf("z's members: %v; want only itself", ms)
	}
}

// A member cut off from the group's channel (it hears nobody, itself
// included) takes no partition from the others, though it hears none of
// them: their silence is its own deafness.
func TestDeafMemberTakesNothing(t *testing.T) {
	const partitions = 8
	b := newBroker()
	b.start(t, "a", partitions)
	b.start(t, "b", partitions)
	b.settled(t, []string{"a", "b"}, partitions)
	count := func() int {
		b.mu.Lock()
		defer b.mu.Unlock()
		n := 0
		for p := range partitions {
			n += len(b.taken[p])
		}
		return n
	}
	taken := count()
	b.mu.Lock()
	b.deaf["a"] = true
	b.mu.Unlock()
	// Long enough for a to have expired b (100ms), were it not deaf.
	for deadline := time.Now().Add(500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if count() != taken {
			b.mu.Lock()
			changed := fmt.Sprint(b.taken)
			b.mu.Unlock()
			t.Fatalf("partitions changed hands while a was deaf: %s", changed)
		}
	}
	if ms := b.groups["a"].Members(); !slices.Equal(ms, []string{"a", "b"}) {
		t.Fatalf("deaf a's members: %v; want b kept", ms)
	}
}

// eventually waits until cond holds, failing t with what after 10s.
func eventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
	}
}

// A member whose release of a partition takes longer than the timeout (its
// deliveries take that long to be settled) has not stopped running
// meanwhile: it keeps the rest of its partitions, and the others keep
// theirs.
func TestSlowReleaseIsNoPause(t *testing.T) {
	const partitions = 8
	b := newBroker()
	b.mu.Lock()
	b.slow["a"] = 300 * time.Millisecond // three timeouts
	b.mu.Unlock()
	b.start(t, "a", partitions)
	b.settled(t, []string{"a"}, partitions)
	b.start(t, "b", partitions)
	b.settled(t, []string{"a", "b"}, partitions) // a's slow release is over
	// a's loop runs again: it would give up its partitions first.
	asked := func() int { b.mu.Lock(); defer b.mu.Unlock(); return b.asked["a"] }
	since := asked()
	eventually(t, func() bool { return asked() >= since+partitions }, "a's loop did not run again after its slow release")
	b.settled(t, []string{"a", "b"}, partitions)
	b.mu.Lock()
	defer b.mu.Unlock()
	if n := b.dropped["a"]; n != 0 {
		t.Fatalf("a gave up %d partitions without draining after a slow release, as if it had not run for a while", n)
	}
}
