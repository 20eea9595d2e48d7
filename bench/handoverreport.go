package main

import (
	"fmt"
	"strings"
)

// renderHandover renders the handover section's table: a row per broker
// and fault.
func renderHandover(sb *strings.Builder, fn *footnotes, res *Results, cfg config) {
	w := func(format string, args ...any) { fmt.Fprintf(sb, format, args...) }
	w("What a fault of one of %d instances costs the keys it held (inbox consumers keeping order, Concurrency %d, each a process of its own; %d keys over %d partitions, %d msg/s; heartbeat %s, gone after %s; stopped or cut off for %s; a handler slow for %s):\n\n",
		handoverInstances, handoverConcurrency, handoverKeys, consPartitions, handoverRate, handoverHeartbeat, handoverTimeout, 2*handoverTimeout, handoverSlow)
	w("| Broker | Fault | Keys it held | To the first moved key applied elsewhere (s, ↓ better) | To every moved key applied again (s, ↓ better) | Longest publish→applied, the slow key aside (s, ↓ better) |\n")
	w("|---|---|---:|---:|---:|---:|\n")
	for _, br := range handoverBrokerList {
		label := br
		if cb, err := consBrokerByName(br); err == nil {
			label = cb.label
		}
		for _, f := range handoverFaultList {
			key := handoverKey(br, f)
			var cells []string
			for _, id := range []string{"ho_moved", "ho_first", "ho_all", "ho_wait"} {
				v, _, ok := cell(res, fn, figureByID(id), key, cfg.runs)
				if !ok && len(res.SkippedOf("ho_first", key)) > 0 {
					v = "not measured (" + strings.Join(res.SkippedOf("ho_first", key), "; ") + ")"
				}
				cells = append(cells, v)
			}
			w("| %s | %s | %s |\n", label, f, strings.Join(cells, " | "))
			label = ""
		}
	}
}
