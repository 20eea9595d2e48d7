package shop_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/courier-go/courier/cmd/courier/internal/shop"
	"github.com/courier-go/courier/internal/testenv"
)

// Each service runs as two instances that consume its topic as one
// consumer: on a NATS server that can (the embedded one), they share the
// keys by partition, each holding some and no partition held twice; on one
// that cannot (2.9), they share the durable consumer. Either way both
// instances of every service apply messages, and every invariant holds.
func TestInstancesShareTheKeys(t *testing.T) {
	onEachStack(t, func(t *testing.T, st *stack) {
		s := st.start(t, st.options(t))
		shared := s.Orders.Instance(0).SharesKeys()
		if shared {
			for _, svc := range s.Services() {
				testenv.Eventually(t, 20*time.Second, func() bool { return splitPartitions(svc) == nil },
					"%s: %v", testenv.Lazy(func() any { return svc.Name() }), testenv.Lazy(func() any { return splitPartitions(svc) }))
			}
		}
		res := load(t, s, 40, shop.LoadConfig{Concurrency: 8})
		a := st.settle(t)
		if a.Orders != len(res.Orders) {
			t.Fatalf("%d orders placed, %d stored", len(res.Orders), a.Orders)
		}
		for _, svc := range s.Services() {
			for _, in := range svc.Instances() {
				if in.Metrics().Inbox.Applied == 0 {
					t.Errorf("%s: instance %d applied nothing (keys shared by partition: %v)", svc.Name(), in.Number(), shared)
				}
			}
		}
	})
}

// splitPartitions says how the instances of svc fail to split the
// DefaultKeyPartitions partitions of its topic: each instance holding
// some, none held twice, every one held.
func splitPartitions(svc shop.Service) error {
	var all []int
	for _, in := range svc.Instances() {
		p := in.Partitions()
		if len(p) == 0 {
			return fmt.Errorf("instance %d holds no partition", in.Number())
		}
		all = append(all, p...)
	}
	slices.Sort(all)
	want := make([]int, shop.DefaultKeyPartitions)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(all, want) {
		return fmt.Errorf("the instances hold partitions %v, want each of %v once", all, want)
	}
	return nil
}

// checkInstances fails t unless the demo ran every service as two
// instances and each of them applied messages.
func checkInstances(t *testing.T, rep *shop.Report) {
	t.Helper()
	for _, s := range shop.Services {
		ins := rep.Instances[s]
		if len(ins) != shop.DefaultInstances {
			t.Errorf("%s ran as %d instances, want %d", s, len(ins), shop.DefaultInstances)
		}
		for i, in := range ins {
			if in.Metrics.Inbox.Applied == 0 {
				t.Errorf("%s: instance %d applied nothing; the instances shared the messages %s", s, i, rep.Sharing)
			}
		}
	}
}
