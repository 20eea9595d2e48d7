package main

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/courier-go/courier/store"
)

// dlqCmd groups the dead-letter commands. Dead letters are named
// relay:ID (a message the broker kept rejecting, in the outbox's database)
// or consumer:ID (a message a consumer parked, in the consumer's database).
type dlqCmd struct {
	List    dlqListCmd    `cmd:"" help:"List dead letters: relay-side and consume-side."`
	Show    dlqShowCmd    `cmd:"" help:"Show one dead letter with its payload and attempt history (counted attempts, and those blamed on the broker)."`
	Replay  dlqReplayCmd  `cmd:"" help:"Replay a dead letter: relay:ID goes back into the outbox, consumer:ID is applied again by its consumer."`
	Discard dlqDiscardCmd `cmd:"" help:"Delete a dead letter for good."`
}

type dlqListCmd struct {
	dbFlags
	Consumer string `help:"Only consume-side dead letters of this consumer." env:"COURIER_DLQ_CONSUMER"`
	Limit    int    `help:"At most this many of each kind." default:"100" env:"COURIER_DLQ_LIMIT"`
	JSON     bool   `help:"Print JSON instead of a table." env:"COURIER_JSON"`
}

type dlqRef struct {
	dbFlags
	Ref string `arg:"" help:"relay:ID or consumer:ID, as listed by courier dlq list."`
}

type dlqShowCmd struct {
	dlqRef
	JSON bool `help:"Print JSON (the payload in base64)." env:"COURIER_JSON"`
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
	if side == "relay" {
		d, err := a.DeadLetter(e.ctx, id)
		if err != nil {
			return refError(c.Ref, err)
		}
		if c.JSON {
			return writeJSON(e, d)
		}
		showDeadLetter(e, c.Ref, d)
		return nil
	}
	p, err := a.ParkedMessage(e.ctx, id)
	if err != nil {
		return refError(c.Ref, err)
	}
	if c.JSON {
		return writeJSON(e, p)
	}
	showParked(e, c.Ref, p)
	return nil
}

// showDeadLetter prints a relay-side dead letter for people: its fields, its
// payload, and each attempt marked "counted" (it counted against the
// message) or "broker" (the broker was unavailable; it did not count).
func showDeadLetter(e *env, ref string, d store.DeadLetter) {
	w := e.stdout
	fmt.Fprintf(w, "%-13s %s\n", "dead letter", ref)
	fmt.Fprintf(w, "%-13s %s\n", "message id", d.MessageID)
	fmt.Fprintf(w, "%-13s %s\n", "topic", d.Topic)
	fmt.Fprintf(w, "%-13s %s\n", "key", d.Key)
	fmt.Fprintf(w, "%-13s %s (version %d)\n", "type", d.Type, d.Version)
	fmt.Fprintf(w, "%-13s %s\n", "occurred", d.OccurredAt.UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(w, "%-13s %s\n", "dead since", d.DeadAt.UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(w, "%-13s %d counted\n", "attempts", d.Attempts)
	fmt.Fprintf(w, "%-13s %s\n", "last error", d.LastError)
	for _, k := range slices.Sorted(maps.Keys(d.Headers)) {
		fmt.Fprintf(w, "%-13s %s: %s\n", "header", k, d.Headers[k])
	}
	showPayload(e, d.ContentType, d.Payload)
	if len(d.History) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%-3s %-20s %-8s %s\n", "#", "WHEN", "COUNTED", "ERROR")
	for i, h := range d.History {
		kind := "broker"
		if h.Counted {
			kind = "counted"
		}
		fmt.Fprintf(w, "%-3d %-20s %-8s %s\n", i+1, h.At.UTC().Format(time.DateTime), kind, h.Error)
	}
	fmt.Fprintln(w, "counted: counted against the message; broker: the broker was unavailable, not counted")
}

// showParked prints a consume-side dead letter for people.
func showParked(e *env, ref string, p store.Parked) {
	w := e.stdout
	fmt.Fprintf(w, "%-13s %s\n", "dead letter", ref)
	fmt.Fprintf(w, "%-13s %s\n", "consumer", p.Consumer)
	fmt.Fprintf(w, "%-13s %s\n", "message id", p.MessageID)
	fmt.Fprintf(w, "%-13s %s\n", "subject", p.Subject)
	fmt.Fprintf(w, "%-13s %s\n", "reason", p.Reason)
	fmt.Fprintf(w, "%-13s %s\n", "parked since", p.ParkedAt.UTC().Format(time.RFC3339Nano))
	if p.ReplayRequested != nil {
		fmt.Fprintf(w, "%-13s %s\n", "replay asked", p.ReplayRequested.UTC().Format(time.RFC3339Nano))
	}
	fmt.Fprintf(w, "%-13s %d\n", "attempts", p.Attempts)
	fmt.Fprintf(w, "%-13s %s\n", "last error", p.Error)
	for _, k := range slices.Sorted(maps.Keys(p.Headers)) {
		fmt.Fprintf(w, "%-13s %s: %s\n", "header", k, strings.Join(p.Headers[k], ", "))
	}
	showPayload(e, "", p.Payload)
	if len(p.History) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%-3s %-20s %s\n", "#", "WHEN", "ERROR")
	for i, h := range p.History {
		fmt.Fprintf(w, "%-3d %-20s %s\n", i+1, h.At.UTC().Format(time.DateTime), h.Error)
	}
}

// showPayload prints a payload as text when it is printable UTF-8, in
// base64 otherwise.
func showPayload(e *env, contentType string, payload []byte) {
	what := fmt.Sprintf("%d bytes", len(payload))
	if contentType != "" {
		what = contentType + ", " + what
	}
	printable := utf8.Valid(payload) && !strings.ContainsFunc(string(payload), func(r rune) bool {
		return !unicode.IsPrint(r) && !unicode.IsSpace(r)
	})
	if printable {
		fmt.Fprintf(e.stdout, "%-13s (%s)\n%s\n", "payload", what, payload)
		return
	}
	fmt.Fprintf(e.stdout, "%-13s (%s, base64)\n%s\n", "payload", what, base64.StdEncoding.EncodeToString(payload))
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
