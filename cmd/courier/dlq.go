package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/courier-go/courier/store"
)

// dlqCmd groups the dead-letter commands. Dead letters are named
// relay:ID (a message the broker kept rejecting, in the outbox's database)
// or consumer:ID (a message a consumer parked, in the consumer's database).
type dlqCmd struct {
	List    dlqListCmd    `cmd:"" help:"List dead letters: relay-side and consume-side."`
	Show    dlqShowCmd    `cmd:"" help:"Show one dead letter with its payload and attempt history."`
	Replay  dlqReplayCmd  `cmd:"" help:"Replay a dead letter: relay:ID goes back into the outbox, consumer:ID is applied again by its consumer."`
	Discard dlqDiscardCmd `cmd:"" help:"Delete a dead letter for good."`
}

type dlqListCmd struct {
	dbFlags
	Consumer string `help:"Only consume-side dead letters of this consumer."`
	Limit    int    `help:"At most this many of each kind." default:"100"`
	JSON     bool   `help:"Print JSON instead of a table."`
}

type dlqRef struct {
	dbFlags
	Ref string `arg:"" help:"relay:ID or consumer:ID, as listed by courier dlq list."`
}

type dlqShowCmd struct {
	dlqRef
	JSON bool `help:"Print JSON."`
}

type dlqReplayCmd struct{ dlqRef }

type dlqDiscardCmd struct{ dlqRef }

func (c *dbFlags) admin(e *env) (store.Admin, func(), error) {
	d, err := c.open(e.ctx, false)
	if err != nil {
		return nil, nil, err
	}
	if err := d.checkSchema(e.ctx); err != nil {
		d.close()
		return nil, nil, err
	}
	return d.admin(), d.close, nil
}

func (c *dlqListCmd) Run(e *env) error {
	a, done, err := c.admin(e)
	if err != nil {
		return err
	}
	defer done()
	var dead []store.DeadLetter
	if c.Consumer == "" {
		if dead, err = a.DeadLetters(e.ctx, c.Limit); err != nil {
			return err
		}
	}
	parked, err := a.Parked(e.ctx, c.Consumer, c.Limit)
	if err != nil {
		return err
	}
	if c.JSON {
		return writeJSON(e, map[string]any{"relay": dead, "consumer": parked})
	}
	if len(dead)+len(parked) == 0 {
		fmt.Fprintln(e.stdout, "no dead letters")
		return nil
	}
	fmt.Fprintf(e.stdout, "%-16s %-20s %-24s %-8s %s\n", "DEAD LETTER", "WHEN", "WHAT", "ATTEMPTS", "LAST ERROR")
	for _, d := range dead {
		fmt.Fprintf(e.stdout, "%-16s %-20s %-24s %-8d %s\n", "relay:"+strconv.FormatInt(d.ID, 10), d.DeadAt.UTC().Format(time.DateTime),
			clip(d.Topic+"/"+d.Type, 24), d.Attempts, clip(d.LastError, 60))
	}
	for _, p := range parked {
		what := p.Consumer + " " + p.Reason
		if p.ReplayRequested != nil {
			what += " (replay asked)"
		}
		fmt.Fprintf(e.stdout, "%-16s %-20s %-24s %-8d %s\n", "consumer:"+strconv.FormatInt(p.ID, 10), p.ParkedAt.UTC().Format(time.DateTime),
			clip(what, 24), p.Attempts, clip(p.Error, 60))
	}
	return nil
}

func (c *dlqShowCmd) Run(e *env) error {
	side, id, err := parseRef(c.Ref)
	if err != nil {
		return err
	}
	a, done, err := c.admin(e)
	if err != nil {
		return err
	}
	defer done()
	var v any
	if side == "relay" {
		v, err = a.DeadLetter(e.ctx, id)
	} else {
		v, err = a.ParkedMessage(e.ctx, id)
	}
	if err != nil {
		return refError(c.Ref, err)
	}
	return writeJSON(e, v) // the payload is bytes: JSON (base64) is the honest form
}

func (c *dlqReplayCmd) Run(e *env) error {
	side, id, err := parseRef(c.Ref)
	if err != nil {
		return err
	}
	a, done, err := c.admin(e)
	if err != nil {
		return err
	}
	defer done()
	if side == "relay" {
		if err := a.ReplayDeadLetter(e.ctx, id); err != nil {
			return refError(c.Ref, err)
		}
		fmt.Fprintf(e.stdout, "%s is back in the outbox; a relay publishes it next\n", c.Ref)
		return nil
	}
	if err := a.RequestReplay(e.ctx, id); err != nil {
		return refError(c.Ref, err)
	}
	fmt.Fprintf(e.stdout, "%s: replay requested; its consumer applies it within seconds and removes it from the list\n", c.Ref)
	return nil
}

func (c *dlqDiscardCmd) Run(e *env) error {
	side, id, err := parseRef(c.Ref)
	if err != nil {
		return err
	}
	a, done, err := c.admin(e)
	if err != nil {
		return err
	}
	defer done()
	if side == "relay" {
		err = a.DiscardDeadLetter(e.ctx, id)
	} else {
		err = a.DiscardParked(e.ctx, id)
	}
	if err != nil {
		return refError(c.Ref, err)
	}
	fmt.Fprintf(e.stdout, "%s discarded\n", c.Ref)
	return nil
}

func parseRef(ref string) (string, int64, error) {
	side, num, ok := strings.Cut(ref, ":")
	id, err := strconv.ParseInt(num, 10, 64)
	if !ok || err != nil || (side != "relay" && side != "consumer") {
		return "", 0, fmt.Errorf("%q is not a dead letter: use relay:ID or consumer:ID as shown by courier dlq list", ref)
	}
	return side, id, nil
}

func refError(ref string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%s does not exist (any more); see courier dlq list", ref)
	}
	return err
}

func writeJSON(e *env, v any) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
