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

	"github.com/courier-go/courier/failgroup"
	"github.com/courier-go/courier/internal/escape"
	"github.com/courier-go/courier/replayguard"
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
	// messageID and lastError are the start of its message id and,
	// consumer side, of its last error: whether its replay can work.
	messageID, lastError string
	// group is the id of its failure group (failgroup.Cause.ID).
	group string
	// parkedAt is, consumer side, when it was parked.
	parkedAt time.Time
}

func relayLetter(d store.DeadLetterSummary) letter {
	return letter{ref: failgroup.Relay + ":" + strconv.FormatInt(d.ID, 10), side: failgroup.Relay, id: d.ID, source: d.Topic + " " + d.Type,
		messageID: d.MessageID, group: failgroup.OfDeadLetter(d.LastError).ID()}
}

func parkedLetter(p store.ParkedSummary) letter {
	return letter{ref: failgroup.Consumer + ":" + strconv.FormatInt(p.ID, 10), side: failgroup.Consumer, id: p.ID,
		source: p.Consumer + " ← " + p.Subject + " " + p.Type, consumer: p.Consumer, messageID: p.MessageID, lastError: p.Error,
		group: failgroup.OfParked(p.Consumer, p.Reason, p.Error).ID(), parkedAt: p.ParkedAt}
}

// guarded is the letter as a guarded replay run takes it.
func (l letter) guarded() replayguard.Letter {
	return replayguard.Letter{Ref: l.ref, Relay: l.relay(), ID: l.id, MessageID: l.messageID, Consumer: l.consumer, ParkedAt: l.parkedAt}
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
	guard := c.options()
	if err := guard.Check(); err != nil {
		return err
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
	guarded := make([]replayguard.Letter, len(letters))
	for i, l := range letters {
		guarded[i] = l.guarded()
	}
	if c.DryRun {
		c.dryRun(e, letters, repairs, guard)
		return nil
	}
	if err := replayguard.CheckRetention(guarded, time.Now(), c.Retention, c.Force, "--force"); err != nil {
		return err
	}
	byRef := make(map[string]int, len(letters))
	for i, l := range letters {
		byRef[l.ref] = i
	}
	run := &replayguard.Run{Letters: guarded, Options: guard, Runs: d.ReplayRuns(), Side: sideOf(letters), Selection: c.selection(guard),
		Replay: func(ctx context.Context, g replayguard.Letter) error {
			i := byRef[g.Ref]
			l := letters[i]
			var err error
			switch {
			case l.relay():
				err = a.ReplayDeadLetter(ctx, l.id)
			case repairs[i]:
				err = c.repairAndReplay(e, a, l)
			default:
				err = a.RequestReplay(ctx, l.id)
			}
			return refError(l.ref, err)
		},
		Outcome: func(ctx context.Context, g replayguard.Letter) (replayguard.Outcome, string, error) {
			done, ok, msg, err := replayOutcome(ctx, d, letters[byRef[g.Ref]])
			switch {
			case err != nil || !done:
				return replayguard.Pending, msg, err
			case ok:
				return replayguard.Succeeded, msg, nil
			}
			return replayguard.FailedAgain, msg, nil
		},
		OnReplayed: func(g replayguard.Letter) {
			if c.Wait > 0 {
				return
			}
			if g.Relay {
				fmt.Fprintf(e.stdout, "%s is back in the outbox; a running relay publishes it (--wait to see the outcome)\n", g.Ref)
			} else {
				fmt.Fprintf(e.stdout, "%s: replay requested; consumer %s applies it when it next looks (every 5s by default) if it is running (--wait to see the outcome)\n", g.Ref, escape.Line(g.Consumer))
			}
		},
		OnOutcome: func(g replayguard.Letter, _ replayguard.Outcome, msg string) {
			fmt.Fprintf(e.stdout, "%-16s %s\n", g.Ref, escape.Line(msg))
		},
	}
	if guard.Guarded() || len(letters) > 1 {
		// Progress goes to stderr, a line a second, so that stdout
		// keeps the outcomes only.
		run.OnProgress = func(p replayguard.Progress) {
			fmt.Fprintf(e.stderr, "replay run: %s\n", escape.Line(p.String()))
		}
	}
	res, err := run.Do(e.ctx)
	if err != nil {
		if res.ID == 0 {
			return err
		}
		return fmt.Errorf("%w (replay run %d: %d of %d replayed, %d left; courier dlq runs shows it)", err, res.ID, res.Replayed, res.Total, res.Left)
	}
	return c.report(e, d, res)
}

// report prints how run res ended: the replays without an outcome after
// --wait, and for a stopped run what was replayed, failed and left; it
// returns an error (exit 1) unless every replay waited for succeeded.
func (c *dlqReplayCmd) report(e *env, d store.Driver[*sql.Tx], res replayguard.Result) error {
	for _, g := range res.Pending {
		l := letter{ref: g.Ref, id: g.ID, side: failgroup.Consumer, consumer: g.Consumer, messageID: g.MessageID}
		if g.Relay {
			l.side = failgroup.Relay
			_, _, msg, _ := replayOutcome(e.ctx, d, l)
			fmt.Fprintf(e.stdout, "%-16s not published after %s: %s; is a relay running? (courier status)\n", l.ref, c.Wait, escape.Line(msg))
		} else {
			fmt.Fprintf(e.stdout, "%-16s not applied after %s: is consumer %s running? The request stands.\n", l.ref, c.Wait, escape.Line(l.consumer))
		}
	}
	if res.State == store.RunStopped {
		return fmt.Errorf("replay run %d %s (%d replayed, %d failed again, %d left); courier dlq runs shows it", res.ID, res.Note, res.Replayed, res.Failed, res.Left)
	}
	if c.Wait == 0 {
		if res.Replayed > 1 {
			fmt.Fprintf(e.stdout, "%d dead letter(s) replayed\n", res.Replayed)
		}
		return nil
	}
	if bad := res.Failed + len(res.Pending); bad > 0 {
		return fmt.Errorf("%d of %d replay(s) did not succeed; see above, and courier dlq show REF", bad, res.Replayed)
	}
	return nil
}

// options are the guards the flags ask for.
func (c *dlqReplayCmd) options() replayguard.Options {
	return replayguard.Options{Canary: c.Canary, Rate: c.Rate, StopOnFailure: c.StopOn, Wait: c.Wait}
}

// selection describes the run's selection and guards, as courier dlq
// runs shows it.
func (c *dlqReplayCmd) selection(guard replayguard.Options) string {
	var parts []string
	switch {
	case len(c.Refs) > 0:
		parts = append(parts, strings.Join(c.Refs, " "))
	case c.Group != "":
		parts = append(parts, "group "+c.Group)
	case c.All && !c.filtered():
		parts = append(parts, "all")
	}
	for _, f := range [][2]string{{"topic", c.Topic}, {"consumer", c.Consumer}, {"error", c.Error}} {
		if f[1] != "" {
			parts = append(parts, f[0]+" "+strconv.Quote(f[1]))
		}
	}
	if c.Side != "both" {
		parts = append(parts, "side "+c.Side)
	}
	if g := guard.Describe(); g != "" {
		parts = append(parts, g)
	}
	return "courier dlq replay: " + strings.Join(parts, "; ")
}

// sideOf is the side of letters: relay, consumer or both.
func sideOf(letters []letter) string {
	side := letters[0].side
	for _, l := range letters {
		if l.side != side {
			return "both"
		}
	}
	return side
}

// dryRun prints what a replay would do, by group (package failgroup),
// with counts, and the guards' plan; it changes nothing.
func (c *dlqReplayCmd) dryRun(e *env, letters []letter, repairs []bool, guard replayguard.Options) {
	var order []string
	byGroup := map[string][]int{}
	for i, l := range letters {
		if _, ok := byGroup[l.group]; !ok {
			order = append(order, l.group)
		}
		byGroup[l.group] = append(byGroup[l.group], i)
	}
	now := time.Now()
	stale := 0
	for _, g := range order {
		first := letters[byGroup[g][0]]
		fmt.Fprintf(e.stdout, "group %s (%s): %d dead letter(s)\n", g, first.side, len(byGroup[g]))
		for _, i := range byGroup[g] {
			l := letters[i]
			verb := "replay"
			if repairs[i] {
				verb = "repair and replay"
			}
			note := ""
			if replayguard.Stale(l.guarded(), now, c.Retention) {
				stale++
				note = fmt.Sprintf(" (parked %s ago, beyond the retention: needs --force)", replayguard.Age(now.Sub(l.parkedAt)))
			}
			fmt.Fprintf(e.stdout, "  would %s %-16s %s%s\n", verb, l.ref, l.what(), note)
		}
	}
	if plan := guard.Describe(); plan != "" {
		fmt.Fprintf(e.stdout, "guards: %s\n", plan)
	}
	if stale > 0 && !c.Force {
		fmt.Fprintf(e.stdout, "%d consumer letter(s) were parked longer ago than the inbox's marker retention (%s): the replay is refused without --force\n", stale, replayguard.Age(c.Retention))
	}
	fmt.Fprintf(e.stdout, "%d group(s); %d dead letter(s) would be replayed (--dry-run: nothing changed)\n", len(order), len(letters))
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

// replayOutcome tells whether a replay ended (done), whether it succeeded
// (ok) and says how, or where it stands.
func replayOutcome(ctx context.Context, d store.Driver[*sql.Tx], l letter) (done, ok bool, msg string, err error) {
	if !l.relay() {
		p, err := d.Admin().ParkedMessage(ctx, l.id)
		o, msg, err := replayguard.ParkedOutcome(p, err, l.consumer)
		return o != replayguard.Pending, o == replayguard.Succeeded, msg, err
	}
	// The row is found by its id, which a replay keeps; a replay that
	// gives it a new one (a dead letter holding its key is replayed with
	// its held messages, renumbered) leaves it to be found by its message
	// id: a dead letter's is unique, and the outbox holds pending rows
	// only.
	attempts, lastErr, inOutbox, err := outboxRow(ctx, d, "id", l.id)
	if err != nil {
		return false, false, "", err
	}
	if !inOutbox {
		var dead sql.NullString
		err := d.InTx(ctx, func(tx *sql.Tx) error {
			return d.QueryRow(ctx, tx, `SELECT last_error FROM courier_outbox_dead_letters WHERE message_id = ?`, []any{&dead}, l.messageID)
		})
		switch {
		case err == nil:
			return true, false, "dead again: " + oneLine(errors.New(dead.String)), nil
		case !errors.Is(err, sql.ErrNoRows):
			return false, false, "", fmt.Errorf("read the dead letter of message %s: %w", l.messageID, err)
		}
		if attempts, lastErr, inOutbox, err = outboxRow(ctx, d, "message_id", l.messageID); err != nil {
			return false, false, "", err
		}
	}
	if inOutbox {
		if lastErr == "" {
			return false, false, "waiting to be published", nil
		}
		return false, false, fmt.Sprintf("%d failed attempt(s), last: %s", attempts, oneLine(errors.New(lastErr))), nil
	}
	return true, true, "published", nil
}

// outboxRow reads the attempts and last error of the outbox row whose
// column (id or message_id) is value, and whether it is there.
func outboxRow(ctx context.Context, d store.Driver[*sql.Tx], column string, value any) (attempts int, lastErr string, found bool, err error) {
	var le sql.NullString
	err = d.InTx(ctx, func(tx *sql.Tx) error {
		return d.QueryRow(ctx, tx, `SELECT attempts, last_error FROM courier_outbox WHERE `+column+` = ?`, []any{&attempts, &le}, value)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return 0, "", false, nil
	}
	if err != nil {
		return 0, "", false, fmt.Errorf("read outbox row %s %v: %w", column, value, err)
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
