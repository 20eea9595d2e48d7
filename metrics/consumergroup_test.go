package metrics_test

import (
	"testing"

	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/metrics"
)

// Each group a consumer committed (inbox.ConsumerConfig.Group) is one
// sample of courier_consumer_group_size_messages, its deliveries, per
// consumer.
func TestConsumerGroupSize(t *testing.T) {
	col, err := metrics.New(metrics.Config{})
	testenv.Must(t, err, "new")
	c := col.Consumer()
	c.Grouped("billing", 3)
	c.Grouped("billing", 100)
	c.Grouped("shipping", 2)
	mfs, err := registry(col).Gather()
	testenv.Must(t, err, "gather")
	got := map[string][2]float64{} // consumer: count, sum
	for _, mf := range mfs {
		if mf.GetName() != "courier_consumer_group_size_messages" {
			continue
		}
		for _, m := range mf.GetMetric() {
			got[m.GetLabel()[0].GetValue()] = [2]float64{float64(m.GetHistogram().GetSampleCount()), m.GetHistogram().GetSampleSum()}
		}
	}
	if got["billing"] != [2]float64{2, 103} || got["shipping"] != [2]float64{1, 2} {
		t.Fatalf("group sizes %v: want billing 2 groups of 103, shipping 1 of 2", got)
	}
}
