package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/courier-go/courier/failgroup"
	"github.com/courier-go/courier/store"
)

// dlqGroupsCmd lists the dead letters grouped by cause (package
// failgroup): what a thousand letters failing for one reason have in
// common, on one line, with the id that replay, discard and export take as
// --group. Max's default is failgroup.DefaultMax, which a tag cannot name
// (TestDLQGroupsMaxDefault holds them equal).
type dlqGroupsCmd struct {
	dbFlags
	Topic    string `help:"Group only the dead letters of this topic (relay side), or whose subject ends in .TOPIC (consumer side)." env:"COURIER_DLQ_TOPIC"`
	Consumer string `help:"Group only this consumer's dead letters (consumer side only)." env:"COURIER_DLQ_CONSUMER"`
	Error    string `help:"Group only the dead letters whose last error contains this text (ignoring case)." env:"COURIER_DLQ_ERROR"`
	Side     string `help:"Group only relay or consumer dead letters." enum:"relay,consumer,both" default:"both" env:"COURIER_DLQ_SIDE"`
	Max      int    `help:"Read at most this many dead letters of each side (by id); the counts are of those." default:"10000" env:"COURIER_DLQ_MAX"`
	JSON     bool   `help:"Print the groups as JSON, with their members' ids." env:"COURIER_JSON"`
}

func (c *dlqGroupsCmd) Run(e *env) error {
	if c.Max < 1 {
		return fmt.Errorf("--max is %d: use 1 or more (default %d)", c.Max, failgroup.DefaultMax)
	}
	a, done, err := c.admin(e)
	if err != nil {
		return err
	}
	defer done()
	rep, err := failgroup.Collect(e.ctx, a, failgroup.Options{Side: sideOption(c.Side), Max: c.Max,
		Filter: store.ListQuery{Topic: c.Topic, Consumer: c.Consumer, Error: c.Error}})
	if err != nil {
		return err
	}
	if c.JSON {
		return writeJSON(e, rep)
	}
	if len(rep.Groups) == 0 {
		fmt.Fprintln(e.stdout, "no dead letters")
		return nil
	}
	showGroups(e, rep)
	if rep.Truncated {
		fmt.Fprintf(e.stdout, "a side holds more than %d dead letters: only the first %d of each were grouped (--max)\n", c.Max, c.Max)
	}
	return nil
}

// showGroups prints one line per group: its id, side, size, first and last
// failure, class, where its letters come from (topics; consumer side, the
// consumers too) and its error pattern, every stored text escaped.
func showGroups(e *env, rep failgroup.Report) {
	const row = "%-12s %-8s %6s %-19s %-19s %-20s %-30s %s\n"
	fmt.Fprintf(e.stdout, row, "GROUP", "SIDE", "COUNT", "FIRST", "LAST", "CLASS", "SOURCE", "PATTERN")
	for _, g := range rep.Groups {
		source := "topic " + strings.Join(g.Topics, ", ")
		if g.Side == failgroup.Consumer {
			source = strings.Join(g.Consumers, ", ") + " ← " + strings.Join(g.Topics, ", ")
		}
		pattern := g.Pattern
		if g.Site != "" {
			pattern = "at " + g.Site + ": " + pattern
		}
		fmt.Fprintf(e.stdout, row, g.ID, g.Side, strconv.Itoa(g.Count), g.First.UTC().Format(time.DateTime), g.Last.UTC().Format(time.DateTime),
			clip(g.Class, 20), clip(source, 30), clip(orDash(pattern), 80))
	}
	fmt.Fprintf(e.stdout, "%d dead letter(s) in %d group(s); courier dlq replay, discard or export --group GROUP acts on a group (--dry-run shows it)\n",
		rep.Read, len(rep.Groups))
}
