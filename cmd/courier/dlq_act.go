package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier/broker/wire"
	"github.com/courier-go/courier/failgroup"
	"github.com/courier-go/courier/internal/escape"
	"github.com/courier-go/courier/store"
)

// letter is one selected dead letter: a relay-side one or a parked one.
type letter struct {
	ref    string
	relay  *store.DeadLetter
	parked *store.Parked
}

// what describes the letter in one short phrase, escaped for the terminal.
func (l letter) what() string {
	if l.relay != nil {
		return escape.Line(l.relay.Topic + " " + l.relay.Type)
	}
	return escape.Line(l.parked.Consumer + " ← " + l.parked.Subject + " " + wire.TypeOf(l.parked.Headers))
}

func (s *dlqSelect) filtered() bool {
	return s.Topic != "" || s.Consumer != "" || s.Error != "" || s.Side != "both"
}

// check validates the selection flags before anything is opened; verb
// names the command in its errors.
func (s *dlqSelect) check(verb string) error {
	hint := "; --dry-run shows the selection"
	if verb == "export" {
		hint = ""
	}
	switch {
	case s.Group != "" && len(s.Refs) > 0:
		return fmt.Errorf("give dead letters to %s (relay:ID, consumer:ID) or select a group with --group, not both", verb)
	case s.Group != "" && s.All:
		return fmt.Errorf("--group and --all do not go together: --group selects one group's dead letters, --all every one")
	case s.Group != "" && !groupID.MatchString(s.Group):
		return fmt.Errorf("--group is %q: a group id is 12 lowercase hexadecimal digits, as courier dlq groups lists them", s.Group)
	case len(s.Refs) > 0 && (s.filtered() || s.All):
		return fmt.Errorf("give dead letters to %s or select them with --topic, --consumer, --error, --side or --all, not both", verb)
	case len(s.Refs) == 0 && !s.filtered() && s.Group == "" && !s.All:
		return fmt.Errorf("which dead letters? name them (relay:ID, consumer:ID), select them with --topic, --consumer, --error, --side or --group (courier dlq groups lists the groups), or pass --all%s", hint)
	case s.Limit < 1:
		return fmt.Errorf("--limit is %d: use 1 or more", s.Limit)
	}
	for _, ref := range s.Refs {
		if _, _, err := parseRef(ref); err != nil {
			return err
		}
	}
	return nil
}

// groupID is the shape of a group's id (failgroup.Cause.ID).
var groupID = regexp.MustCompile(`^[0-9a-f]{12}$`)

// pick returns the selected dead letters, whole (payloads and histories
// included). Notes on the selection (a group cut by --limit) go to
// e.stderr.
func (s *dlqSelect) pick(e *env, a store.Admin) ([]letter, error) {
	if s.Group != "" {
		return s.pickGroup(e, a)
	}
	ctx := e.ctx
	var out []letter
	for _, ref := range s.Refs {
		side, id, _ := parseRef(ref)
		l, err := fetchLetter(ctx, a, side, id)
		if err != nil {
			return nil, refError(ref, err)
		}
		l.ref = ref
		out = append(out, l)
	}
	if len(s.Refs) > 0 {
		return out, nil
	}
	if s.Side != "consumer" && s.Consumer == "" {
		dead, err := a.DeadLetters(ctx, s.Limit)
		if err != nil {
			return nil, err
		}
		for i := range dead {
			d := &dead[i]
			if (s.Topic == "" || d.Topic == s.Topic) && strings.Contains(d.LastError, s.Error) {
				out = append(out, letter{ref: "relay:" + strconv.FormatInt(d.ID, 10), relay: d})
			}
		}
	}
	if s.Side != "relay" {
		parked, err := a.Parked(ctx, s.Consumer, s.Limit)
		if err != nil {
			return nil, err
		}
		for i := range parked {
			p := &parked[i]
			if (s.Topic == "" || p.Subject == s.Topic || strings.HasSuffix(p.Subject, "."+s.Topic)) && strings.Contains(p.Error, s.Error) {
				out = append(out, letter{ref: "consumer:" + strconv.FormatInt(p.ID, 10), parked: p})
			}
		}
	}
	return out, nil
}

// fetchLetter reads one dead letter of side whole, or store.ErrNotFound.
func fetchLetter(ctx context.Context, a store.Admin, side string, id int64) (letter, error) {
	ref := side + ":" + strconv.FormatInt(id, 10)
	if side == failgroup.Relay {
		d, err := a.DeadLetter(ctx, id)
		return letter{ref: ref, relay: &d}, err
	}
	p, err := a.ParkedMessage(ctx, id)
	return letter{ref: ref, parked: &p}, err
}

// pickGroup returns the dead letters of group s.Group, among those the
// filters select (read by failgroup.Collect), the first s.Limit of them.
// Those that left the database since they were grouped (replayed or
// discarded meanwhile) are left out.
func (s *dlqSelect) pickGroup(e *env, a store.Admin) ([]letter, error) {
	rep, err := failgroup.Collect(e.ctx, a, failgroup.Options{Side: sideOption(s.Side),
		Filter: store.ListQuery{Topic: s.Topic, Consumer: s.Consumer, Error: s.Error}})
	if err != nil {
		return nil, err
	}
	g, ok := rep.Find(s.Group)
	if !ok {
		msg := fmt.Sprintf("no group %s among %d groups: courier dlq groups lists them", s.Group, len(rep.Groups))
		if s.filtered() {
			msg += " (with the same --topic, --consumer, --error and --side)"
		}
		if rep.Truncated {
			msg += fmt.Sprintf("; only the first %d dead letters of each side were grouped", failgroup.DefaultMax)
		}
		return nil, errors.New(msg)
	}
	if rep.Truncated {
		fmt.Fprintf(e.stderr, "note: more than %d dead letters on a side: only the first %d were grouped, so group %s may hold more than these; run again once these are done\n",
			failgroup.DefaultMax, failgroup.DefaultMax, g.ID)
	}
	ids := g.IDs
	if len(ids) > s.Limit {
		fmt.Fprintf(e.stderr, "note: group %s holds %d dead letters; selecting the first %d (--limit)\n", g.ID, len(ids), s.Limit)
		ids = ids[:s.Limit]
	}
	out := make([]letter, 0, len(ids))
	for _, id := range ids {
		l, err := fetchLetter(e.ctx, a, g.Side, id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			fmt.Fprintf(e.stderr, "note: %s left the group meanwhile (replayed or discarded)\n", g.Ref(id))
			continue
		case err != nil:
			return nil, fmt.Errorf("%s: %w", g.Ref(id), err)
		}
		out = append(out, l)
	}
	return out, nil
}

// sideOption is failgroup.Options.Side for a --side flag.
func sideOption(side string) string {
	if side == "both" {
		return ""
	}
	return side
}

func (c *dlqReplayCmd) Run(e *env) error {
	if err := c.check("replay"); err != nil {
		return err
	}
	if c.Wait < 0 {
		return fmt.Errorf("--wait is %s: use a duration such as 30s, or 0 not to wait", c.Wait)
	}
	d, err := c.open(e.ctx, false, "")
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.CheckSchema(e.ctx); err != nil {
		return err
	}
	a := d.Admin()
	letters, err := c.pick(e, a)
	if err != nil {
		return err
	}
	if len(letters) == 0 {
		fmt.Fprintln(e.stdout, "no dead letters match")
		return nil
	}
	// Every letter is checked before any is touched.
	repairs := make([]*repair, len(letters))
	for i, l := range letters {
		if repairs[i], err = c.repair(l); err != nil {
			return err
		}
	}
	if c.DryRun {
		for i, l := range letters {
			verb := "replay"
			if repairs[i] != nil {
				verb = "repair and replay"
			}
			fmt.Fprintf(e.stdout, "would %s %-16s %s\n", verb, l.ref, l.what())
		}
		fmt.Fprintf(e.stdout, "%d dead letter(s) would be replayed (--dry-run: nothing changed)\n", len(letters))
		return nil
	}
	var asked []letter
	for i, l := range letters {
		switch {
		case l.relay != nil:
			err = a.ReplayDeadLetter(e.ctx, l.relay.ID)
		case repairs[i] != nil:
			if err = a.RepairParked(e.ctx, l.parked.ID, repairs[i].messageID, repairs[i].headers); err == nil {
				err = a.RequestReplay(e.ctx, l.parked.ID)
			}
		default:
			err = a.RequestReplay(e.ctx, l.parked.ID)
		}
		if err != nil {
			return fmt.Errorf("%w (replayed before it: %d of %d)", refError(l.ref, err), len(asked), len(letters))
		}
		asked = append(asked, l)
		if c.Wait > 0 {
			continue
		}
		if l.relay != nil {
			fmt.Fprintf(e.stdout, "%s is back in the outbox; a running relay publishes it (--wait to see the outcome)\n", l.ref)
		} else {
			fmt.Fprintf(e.stdout, "%s: replay requested; consumer %s applies it when it next looks (every 5s by default) if it is running (--wait to see the outcome)\n", l.ref, escape.Line(l.parked.Consumer))
		}
	}
	if c.Wait == 0 {
		if len(asked) > 1 {
			fmt.Fprintf(e.stdout, "%d dead letter(s) replayed\n", len(asked))
		}
		return nil
	}
	return waitReplays(e, d, asked, c.Wait)
}

// repair is what replay changes in a consumer letter before replaying it.
type repair struct {
	messageID string
	headers   map[string][]string
}

// repair works out the repair --new-id and --set-header ask for on l (nil
// for none), and refuses a replay that would fail again for want of a
// message id.
func (c *dlqReplayCmd) repair(l letter) (*repair, error) {
	if l.relay != nil {
		if c.NewID || len(c.SetHeader) > 0 {
			return nil, fmt.Errorf("%s: --new-id and --set-header repair consumer letters only; a relay letter goes back into the outbox as it was written", l.ref)
		}
		return nil, nil
	}
	p := l.parked
	if !c.NewID && len(c.SetHeader) == 0 {
		if p.MessageID == "" {
			return nil, fmt.Errorf("%s has no message id (its headers were malformed: %s), so its replay would fail again: give it one with --new-id (and repair other headers with --set-header NAME=VALUE), or discard it",
				l.ref, clip(p.Error, 80))
		}
		return nil, nil
	}
	r := &repair{messageID: p.MessageID, headers: maps.Clone(p.Headers)}
	if r.headers == nil {
		r.headers = map[string][]string{}
	}
	for k, v := range c.SetHeader {
		r.headers[k] = []string{v}
	}
	if v, ok := c.SetHeader[jetstream.MsgIDHeader]; ok {
		r.messageID = v
	}
	if c.NewID {
		if r.messageID != "" {
			return nil, fmt.Errorf("--new-id: %s has a message id already (%s); another would defeat the inbox's deduplication", l.ref, r.messageID)
		}
		id, err := uuid.NewV7()
		if err != nil {
			return nil, err
		}
		r.messageID = id.String()
		r.headers[jetstream.MsgIDHeader] = []string{r.messageID}
	}
	if r.messageID == "" {
		return nil, fmt.Errorf("%s has no message id, so its replay would fail again: add --new-id", l.ref)
	}
	return r, nil
}

// waitReplays follows each replay until it succeeds, fails again or wait
// has passed, and reports each outcome.
func waitReplays(e *env, d store.Driver[*sql.Tx], letters []letter, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	pending := letters
	failed := 0
	for {
		var still []letter
		for _, l := range pending {
			done, ok, msg, err := replayOutcome(e.ctx, d, l)
			if err != nil {
				return err
			}
			if !done {
				still = append(still, l)
				continue
			}
			if !ok {
				failed++
			}
			fmt.Fprintf(e.stdout, "%-16s %s\n", l.ref, escape.Line(msg))
		}
		pending = still
		if len(pending) == 0 || time.Now().After(deadline) {
			break
		}
		select {
		case <-e.ctx.Done():
			return e.ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	for _, l := range pending {
		failed++
		if l.relay != nil {
			_, _, msg, _ := replayOutcome(e.ctx, d, l)
			fmt.Fprintf(e.stdout, "%-16s not published after %s: %s; is a relay running? (courier status)\n", l.ref, wait, escape.Line(msg))
		} else {
			fmt.Fprintf(e.stdout, "%-16s not applied after %s: is consumer %s running? The request stands.\n", l.ref, wait, escape.Line(l.parked.Consumer))
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d replay(s) did not succeed; see above, and courier dlq show REF", failed, len(letters))
	}
	return nil
}

// replayOutcome tells whether a replay ended (done), whether it succeeded
// (ok) and says how, or where it stands.
func replayOutcome(ctx context.Context, d store.Driver[*sql.Tx], l letter) (done, ok bool, msg string, err error) {
	a := d.Admin()
	if l.parked != nil {
		p, err := a.ParkedMessage(ctx, l.parked.ID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return true, true, "applied by consumer " + l.parked.Consumer, nil
		case err != nil:
			return false, false, "", err
		case p.ReplayRequested == nil:
			// The consumer withdrew the request: the replay failed.
			return true, false, "replay failed, still parked: " + oneLine(errors.New(p.Error)), nil
		}
		return false, false, "replay requested", nil
	}
	attempts, lastErr, inOutbox, err := outboxRow(ctx, d, l.relay.ID)
	if err != nil {
		return false, false, "", err
	}
	if inOutbox {
		if lastErr == "" {
			return false, false, "waiting to be published", nil
		}
		return false, false, fmt.Sprintf("%d failed attempt(s), last: %s", attempts, oneLine(errors.New(lastErr))), nil
	}
	dl, err := a.DeadLetter(ctx, l.relay.ID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return true, true, "published", nil
	case err != nil:
		return false, false, "", err
	}
	return true, false, "dead again: " + oneLine(errors.New(dl.LastError)), nil
}

// outboxRow reads the attempts and last error of outbox row id, and whether
// it is still there.
func outboxRow(ctx context.Context, d store.Driver[*sql.Tx], id int64) (attempts int, lastErr string, found bool, err error) {
	var le sql.NullString
	err = d.InTx(ctx, func(tx *sql.Tx) error {
		return d.QueryRow(ctx, tx, `SELECT attempts, last_error FROM courier_outbox WHERE id = ?`, []any{&attempts, &le}, id)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return 0, "", false, nil
	}
	if err != nil {
		return 0, "", false, fmt.Errorf("read outbox row %d: %w", id, err)
	}
	return attempts, le.String, true, nil
}

func (c *dlqDiscardCmd) Run(e *env) error {
	if err := c.check("discard"); err != nil {
		return err
	}
	a, done, err := c.admin(e)
	if err != nil {
		return err
	}
	defer done()
	letters, err := c.pick(e, a)
	if err != nil {
		return err
	}
	if len(letters) == 0 {
		fmt.Fprintln(e.stdout, "no dead letters match")
		return nil
	}
	for i, l := range letters {
		if c.DryRun {
			fmt.Fprintf(e.stdout, "would discard %-16s %s\n", l.ref, l.what())
			continue
		}
		if l.relay != nil {
			err = a.DiscardDeadLetter(e.ctx, l.relay.ID)
		} else {
			err = a.DiscardParked(e.ctx, l.parked.ID)
		}
		if err != nil {
			return fmt.Errorf("%w (discarded before it: %d of %d)", refError(l.ref, err), i, len(letters))
		}
		fmt.Fprintf(e.stdout, "%s discarded\n", l.ref)
	}
	switch {
	case c.DryRun:
		fmt.Fprintf(e.stdout, "%d dead letter(s) would be discarded (--dry-run: nothing changed)\n", len(letters))
	case len(letters) > 1:
		fmt.Fprintf(e.stdout, "%d dead letter(s) discarded\n", len(letters))
	}
	return nil
}
