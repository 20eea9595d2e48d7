package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier/failgroup"
	"github.com/courier-go/courier/internal/escape"
	"github.com/courier-go/courier/store"
)

// letter is one selected dead letter, relay-side or parked, as its
// summary describes it (store.Admin's ListDeadLetters and ListParked):
// selecting a thousand letters reads no payload, no history and no
// header. A command reads a letter whole only where it needs the whole,
// one letter at a time.
type letter struct {
	ref  string
	side string // failgroup.Relay or failgroup.Consumer
	id   int64
	// source is where it comes from and its type: its topic, or its
	// consumer and subject; consumer is, consumer side, its consumer.
	source, consumer string
	// messageID and lastError are, consumer side, the start of its
	// message id and of its last error: whether its replay can work.
	messageID, lastError string
}

func relayLetter(d store.DeadLetterSummary) letter {
	return letter{ref: failgroup.Relay + ":" + strconv.FormatInt(d.ID, 10), side: failgroup.Relay, id: d.ID, source: d.Topic + " " + d.Type}
}

func parkedLetter(p store.ParkedSummary) letter {
	return letter{ref: failgroup.Consumer + ":" + strconv.FormatInt(p.ID, 10), side: failgroup.Consumer, id: p.ID,
		source: p.Consumer + " ← " + p.Subject + " " + p.Type, consumer: p.Consumer, messageID: p.MessageID, lastError: p.Error}
}

// relay reports whether the letter is a relay-side dead letter.
func (l letter) relay() bool { return l.side == failgroup.Relay }

// what describes the letter in one short phrase, escaped for the terminal.
func (l letter) what() string { return escape.Line(l.source) }

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

// pick returns the selected dead letters, as summaries. Notes on the
// selection (a group cut by --limit, letters gone meanwhile) go to
// e.stderr. The filters are matched by the database (store.ListQuery), so
// --limit counts the letters they select.
func (s *dlqSelect) pick(e *env, a store.Admin) ([]letter, error) {
	if s.Group != "" {
		return s.pickGroup(e, a)
	}
	if len(s.Refs) > 0 {
		return pickRefs(e, a, s.Refs)
	}
	var out []letter
	if s.Side != "consumer" && s.Consumer == "" {
		dead, err := listAll(e, a.ListDeadLetters, store.ListQuery{Topic: s.Topic, Error: s.Error}, s.Limit,
			func(d store.DeadLetterSummary) int64 { return d.ID })
		if err != nil {
			return nil, err
		}
		for _, d := range dead {
			out = append(out, relayLetter(d))
		}
	}
	if s.Side != "relay" {
		parked, err := listAll(e, a.ListParked, store.ListQuery{Topic: s.Topic, Consumer: s.Consumer, Error: s.Error}, s.Limit,
			func(p store.ParkedSummary) int64 { return p.ID })
		if err != nil {
			return nil, err
		}
		for _, p := range parked {
			out = append(out, parkedLetter(p))
		}
	}
	return out, nil
}

// pickRefs returns the letters refs name (checked already), in their
// order, or an error naming the first that does not exist.
func pickRefs(e *env, a store.Admin, refs []string) ([]letter, error) {
	ids := map[string][]int64{}
	for _, ref := range refs {
		side, id, _ := parseRef(ref)
		ids[side] = append(ids[side], id)
	}
	found := map[string]map[int64]letter{}
	for side, list := range ids {
		var err error
		if found[side], err = summaries(e, a, side, list); err != nil {
			return nil, err
		}
	}
	out := make([]letter, 0, len(refs))
	for _, ref := range refs {
		side, id, _ := parseRef(ref)
		l, ok := found[side][id]
		if !ok {
			return nil, refError(ref, store.ErrNotFound)
		}
		l.ref = ref
		out = append(out, l)
	}
	return out, nil
}

// summaries reads the letters of side whose ids are ids, by id, store.MaxListLimit
// at a time; those that do not exist are not in it.
func summaries(e *env, a store.Admin, side string, ids []int64) (map[int64]letter, error) {
	out := make(map[int64]letter, len(ids))
	for len(ids) > 0 {
		n := min(len(ids), store.MaxListLimit)
		q := store.ListQuery{IDs: ids[:n], Limit: n}
		ids = ids[n:]
		if side == failgroup.Relay {
			dead, err := a.ListDeadLetters(e.ctx, q)
			if err != nil {
				return nil, err
			}
			for _, d := range dead {
				out[d.ID] = relayLetter(d)
			}
			continue
		}
		parked, err := a.ListParked(e.ctx, q)
		if err != nil {
			return nil, err
		}
		for _, p := range parked {
			out[p.ID] = parkedLetter(p)
		}
	}
	return out, nil
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
	found, err := summaries(e, a, g.Side, ids)
	if err != nil {
		return nil, err
	}
	out := make([]letter, 0, len(ids))
	for _, id := range ids {
		l, ok := found[id]
		if !ok {
			fmt.Fprintf(e.stderr, "note: %s left the group meanwhile (replayed or discarded)\n", g.Ref(id))
			continue
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
	// Every letter is checked before any is touched, with what its
	// summary holds; a letter to repair is read whole when it is.
	repairs := make([]bool, len(letters))
	for i, l := range letters {
		r, err := c.repair(l.ref, l.relay(), l.messageID, l.lastError, nil)
		if err != nil {
			return err
		}
		repairs[i] = r != nil
	}
	if c.DryRun {
		for i, l := range letters {
			verb := "replay"
			if repairs[i] {
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
		case l.relay():
			err = a.ReplayDeadLetter(e.ctx, l.id)
		case repairs[i]:
			err = c.repairAndReplay(e, a, l)
		default:
			err = a.RequestReplay(e.ctx, l.id)
		}
		if err != nil {
			return fmt.Errorf("%w (replayed before it: %d of %d)", refError(l.ref, err), len(asked), len(letters))
		}
		asked = append(asked, l)
		if c.Wait > 0 {
			continue
		}
		if l.relay() {
			fmt.Fprintf(e.stdout, "%s is back in the outbox; a running relay publishes it (--wait to see the outcome)\n", l.ref)
		} else {
			fmt.Fprintf(e.stdout, "%s: replay requested; consumer %s applies it when it next looks (every 5s by default) if it is running (--wait to see the outcome)\n", l.ref, escape.Line(l.consumer))
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

// repairAndReplay reads the parked letter l whole, repairs it as
// --new-id and --set-header ask and asks for its replay.
func (c *dlqReplayCmd) repairAndReplay(e *env, a store.Admin, l letter) error {
	p, err := a.ParkedMessage(e.ctx, l.id)
	if err != nil {
		return err
	}
	r, err := c.repair(l.ref, false, p.MessageID, p.Error, p.Headers)
	if err != nil {
		return err
	}
	if err := a.RepairParked(e.ctx, l.id, r.messageID, r.headers); err != nil {
		return err
	}
	return a.RequestReplay(e.ctx, l.id)
}

// repair works out the repair --new-id and --set-header ask for on the
// letter ref (nil for none) whose message id, last error and headers are
// given (relay: a relay letter), and refuses a replay that would fail
// again for want of a message id.
func (c *dlqReplayCmd) repair(ref string, relay bool, messageID, lastError string, headers map[string][]string) (*repair, error) {
	if relay {
		if c.NewID || len(c.SetHeader) > 0 {
			return nil, fmt.Errorf("%s: --new-id and --set-header repair consumer letters only; a relay letter goes back into the outbox as it was written", ref)
		}
		return nil, nil
	}
	if !c.NewID && len(c.SetHeader) == 0 {
		if messageID == "" {
			return nil, fmt.Errorf("%s has no message id (its headers were malformed: %s), so its replay would fail again: give it one with --new-id (and repair other headers with --set-header NAME=VALUE), or discard it",
				ref, clip(lastError, 80))
		}
		return nil, nil
	}
	r := &repair{messageID: messageID, headers: maps.Clone(headers)}
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
			return nil, fmt.Errorf("--new-id: %s has a message id already (%s); another would defeat the inbox's deduplication", ref, r.messageID)
		}
		id, err := uuid.NewV7()
		if err != nil {
			return nil, err
		}
		r.messageID = id.String()
		r.headers[jetstream.MsgIDHeader] = []string{r.messageID}
	}
	if r.messageID == "" {
		return nil, fmt.Errorf("%s has no message id, so its replay would fail again: add --new-id", ref)
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
		if l.relay() {
			_, _, msg, _ := replayOutcome(e.ctx, d, l)
			fmt.Fprintf(e.stdout, "%-16s not published after %s: %s; is a relay running? (courier status)\n", l.ref, wait, escape.Line(msg))
		} else {
			fmt.Fprintf(e.stdout, "%-16s not applied after %s: is consumer %s running? The request stands.\n", l.ref, wait, escape.Line(l.consumer))
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
	if !l.relay() {
		p, err := a.ParkedMessage(ctx, l.id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return true, true, "applied by consumer " + l.consumer, nil
		case err != nil:
			return false, false, "", err
		case p.ReplayRequested == nil:
			// The consumer withdrew the request: the replay failed.
			return true, false, "replay failed, still parked: " + oneLine(errors.New(p.Error)), nil
		}
		return false, false, "replay requested", nil
	}
	attempts, lastErr, inOutbox, err := outboxRow(ctx, d, l.id)
	if err != nil {
		return false, false, "", err
	}
	if inOutbox {
		if lastErr == "" {
			return false, false, "waiting to be published", nil
		}
		return false, false, fmt.Sprintf("%d failed attempt(s), last: %s", attempts, oneLine(errors.New(lastErr))), nil
	}
	dl, err := a.DeadLetter(ctx, l.id)
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
		if l.relay() {
			err = a.DiscardDeadLetter(e.ctx, l.id)
		} else {
			err = a.DiscardParked(e.ctx, l.id)
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
