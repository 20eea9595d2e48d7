package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/courier-go/courier/store"
)

// dlqRunsCmd lists the replay runs the database keeps
// (store.ReplayRuns): those of courier dlq replay and of every
// dashboard, newest first.
type dlqRunsCmd struct {
	dbFlags
	Limit int  `help:"At most this many runs, newest first." default:"20" env:"COURIER_DLQ_LIMIT"`
	JSON  bool `help:"Print JSON instead of a table." env:"COURIER_JSON"`
}

func (c *dlqRunsCmd) Run(e *env) error {
	if c.Limit < 1 || c.Limit > store.MaxListLimit {
		return fmt.Errorf("--limit is %d: use 1 to %d", c.Limit, store.MaxListLimit)
	}
	d, err := c.open(e.ctx, false, "")
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.CheckSchema(e.ctx); err != nil {
		return err
	}
	runs, err := d.ReplayRuns().ListRuns(e.ctx, 0, c.Limit)
	if err != nil {
		return err
	}
	if c.JSON {
		return writeJSON(e, runs)
	}
	if len(runs) == 0 {
		fmt.Fprintln(e.stdout, "no replay runs")
		return nil
	}
	const row = "%-6s %-19s %-8s %-8s %6s %8s %6s %6s %-19s %-40s %s\n"
	fmt.Fprintf(e.stdout, row, "RUN", "STARTED", "SIDE", "STATE", "TOTAL", "REPLAYED", "FAILED", "LEFT", "LAST HEARD", "SELECTION", "NOTE")
	for _, r := range runs {
		fmt.Fprintf(e.stdout, row, strconv.FormatInt(r.ID, 10), r.StartedAt.UTC().Format(time.DateTime), clip(r.Side, 8), clip(r.State, 8),
			strconv.Itoa(r.Total), strconv.Itoa(r.Replayed), strconv.Itoa(r.Failed), strconv.Itoa(r.Left),
			r.UpdatedAt.UTC().Format(time.DateTime), clip(r.Selection, 40), clip(r.Note, 100))
	}
	return nil
}
