package main

import (
	"encoding/json"
	"fmt"
	"time"
)

type statusCmd struct {
	dbFlags
	JSON bool `help:"Print JSON instead of a table." env:"COURIER_JSON"`
}

func (c *statusCmd) Run(e *env) error {
	d, err := c.open(e.ctx, false, "")
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.CheckSchema(e.ctx); err != nil {
		return err
	}
	st, err := d.Admin().Stats(e.ctx)
	if err != nil {
		return err
	}
	if c.JSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Pending           int64   `json:"pending"`
			Leased            int64   `json:"leased"`
			InBackoff         int64   `json:"in_backoff"`
			DeadLetters       int64   `json:"dead_letters"`
			OldestPendingAgeS float64 `json:"oldest_pending_age_seconds"`
		}{st.Pending, st.Leased, st.InBackoff, st.DeadLetters, st.OldestPendingAge().Seconds()})
	}
	rows := []struct{ label, value string }{
		{"pending", fmt.Sprint(st.Pending)},
		{"  leased to a relay", fmt.Sprint(st.Leased)},
		{"  in backoff", fmt.Sprint(st.InBackoff)},
		{"oldest pending", age(st.OldestPendingAge())},
		{"dead letters", fmt.Sprint(st.DeadLetters)},
	}
	for _, r := range rows {
		fmt.Fprintf(e.stdout, "%-20s %10s\n", r.label, r.value)
	}
	return nil
}

func age(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}
