package nats

import (
	"testing"
	"time"
)

// Zero fields take the documented defaults, set ones are kept.
func TestSetDefaults(t *testing.T) {
	var p PublisherConfig
	p.setDefaults()
	if p.AckTimeout != DefaultAckTimeout || p.MaxPending != DefaultMaxPending || p.MaxBatches != DefaultMaxBatches {
		t.Errorf("PublisherConfig defaults: %+v", p)
	}
	p = PublisherConfig{AckTimeout: time.Second, MaxPending: 7, MaxBatches: 3}
	p.setDefaults()
	if p.AckTimeout != time.Second || p.MaxPending != 7 || p.MaxBatches != 3 {
		t.Errorf("PublisherConfig settings lost: %+v", p)
	}
	s := SubscriberConfig{Consumer: "c"}
	s.setDefaults()
	if s.Stream != DefaultStream || s.AckWait != DefaultAckWait || s.MaxAckPending != DefaultMaxAckPending || s.Prefetch != DefaultPrefetch {
		t.Errorf("SubscriberConfig defaults: %+v", s)
	}
	var st StreamConfig
	st.setDefaults(Config{SubjectPrefix: "shop."})
	if st.Name != DefaultStream || len(st.Subjects) != 1 || st.Subjects[0] != "shop.>" || st.Duplicates != DefaultDuplicates {
		t.Errorf("StreamConfig defaults: %+v", st)
	}
}
