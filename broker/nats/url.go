package nats

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/courier-go/courier/internal/redact"
)

// URLParams are the query parameters ParseURL knows.
const URLParams = "batch_time, max_batches, atomic_batches=off"

// ParseURL takes the Publisher's settings out of rawURL, NATS server URLs
// separated by commas with an optional query at the end, such as
//
//	nats://host1:4222,nats://host2:4222?batch_time=6ms&max_batches=8
//
// and returns the servers without the query, for Connect, and the
// settings: batch_time (PublisherConfig.BatchTime), max_batches
// (MaxBatches) and atomic_batches=off (NoAtomicBatches). Any other
// parameter is an error naming it.
func ParseURL(rawURL string) (servers string, cfg PublisherConfig, err error) {
	servers, rawQuery, _ := strings.Cut(rawURL, "?")
	query, err := url.ParseQuery(rawQuery)
	if err != nil {
		return "", PublisherConfig{}, fmt.Errorf("nats: URL %q: query: %w", redact.URL(rawURL), err)
	}
	for k, v := range query {
		last := v[len(v)-1]
		switch k {
		case "batch_time":
			d, err := time.ParseDuration(last)
			if err != nil || d <= 0 {
				return "", PublisherConfig{}, fmt.Errorf("nats: URL %q: batch_time=%q: want a duration above 0, such as 4ms", redact.URL(rawURL), last)
			}
			cfg.BatchTime = d
		case "max_batches":
			n, err := strconv.Atoi(last)
			if err != nil || n <= 0 {
				return "", PublisherConfig{}, fmt.Errorf("nats: URL %q: max_batches=%q: want a whole number above 0", redact.URL(rawURL), last)
			}
			cfg.MaxBatches = n
		case "atomic_batches":
			switch last {
			case "off":
				cfg.NoAtomicBatches = true
			case "on":
			default:
				return "", PublisherConfig{}, fmt.Errorf("nats: URL %q: atomic_batches=%q: want on or off", redact.URL(rawURL), last)
			}
		default:
			return "", PublisherConfig{}, fmt.Errorf("nats: URL %q: unknown parameter %q (known: %s)", redact.URL(rawURL), k, URLParams)
		}
	}
	return servers, cfg, nil
}
