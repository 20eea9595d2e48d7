package latency

import (
	"context"
	"fmt"
	"time"

	"github.com/courier-go/courier/store"
)

// Read returns the samples d recorded at or after since, oldest first, at
// most most of them (0 or less: store.MaxLatencyRows, one page). It reads
// page after page of store.MaxLatencyRows, each from the last one's At,
// leaving out what the page before returned. full reports that it stopped
// with more left: the newest samples are missing.
func Read(ctx context.Context, d store.Delivery, since time.Time, most int) (samples []store.LatencySample, full bool, err error) {
	seen := map[int64]bool{}
	for {
		page, err := d.Latency(ctx, since, store.MaxLatencyRows)
		if err != nil {
			return samples, false, fmt.Errorf("latency: read the samples since %s: %w", since.Format(time.RFC3339), err)
		}
		fresh := 0
		for _, s := range page {
			if seen[s.ID] {
				continue
			}
			if most > 0 && len(samples) >= most || most <= 0 && len(samples) >= store.MaxLatencyRows {
				return samples, true, nil
			}
			seen[s.ID] = true
			samples = append(samples, s)
			fresh++
		}
		if len(page) < store.MaxLatencyRows {
			return samples, false, nil
		}
		if fresh == 0 {
			// A page of samples recorded at the same time, all seen: more
			// of them than a page holds. Stop rather than go round.
			return samples, true, nil
		}
		since = page[len(page)-1].At
	}
}
