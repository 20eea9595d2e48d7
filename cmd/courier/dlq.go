package main

import (
	"context"
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

	"github.com/courier-go/courier/internal/escape"
	"github.com/courier-go/courier/store"
)

// dlqCmd groups the dead-letter commands. Dead letters are named
// relay:ID (a message the broker kept rejecting, in the outbox's database)
// or consumer:ID (a message a consumer parked, in the consumer's database).
type dlqCmd struct {
	List    dlqListCmd    `cmd:"" help:"List dead letters, relay-side and consume-side, as summaries: no payload, history or headers but the type; the start of each error and text (dlq show prints one whole)."`
	Show    dlqShowCmd    `cmd:"" help:"Show one dead letter with its payload and attempt history (counted attempts, and those blamed on the broker); the first 4 KiB of the payload, of each header and of each error unless --full."`
	Groups  dlqGroupsCmd  `cmd:"" help:"Group dead letters by the cause of their failure (side, consumer, panic site, error without its ids and numbers): one line per group, with its id for --group."`
	Replay  dlqReplayCmd  `cmd:"" help:"Replay dead letters, named or selected (--topic, --consumer, --error, --side, --group, --all): relay:ID goes back into the outbox, consumer:ID is applied again by its consumer; --wait reports the outcome."`
	Discard dlqDiscardCmd `cmd:"" help:"Delete dead letters for good, named or selected (--topic, --consumer, --error, --side, --group, --all)."`
	Runs    dlqRunsCmd    `cmd:"" help:"List the replay runs (courier dlq replay, the dashboard), newest first: selection, state, progress and outcome, as the database keeps them."`
	Export  dlqExportCmd  `cmd:"" help:"Write dead letters, named or selected (--topic, --consumer, --error, --side, --group, --all), as JSON Lines: one whole record a line, payload in base64; changes nothing."`
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
	JSON bool `help:"Print JSON, whole (the payload in base64)." env:"COURIER_JSON"`
	Full bool `help:"Print the payload, each header and each error whole; without it each stops after 4 KiB, with a line that says how much was left out." env:"COURIER_DLQ_FULL"`
}

// showBytes is how much of a payload, a header value or an error courier
// dlq show prints without --full: a dead letter may hold megabytes, which
// would scroll everything else off the terminal.
const showBytes = 4 << 10

// cut returns the start of s that dlq show prints, at most showBytes
// long and ending on a whole character (s whole with full), and how many
// bytes it leaves out.
func cut(s string, full bool) (string, int) {
	if full || len(s) <= showBytes {
		return s, 0
	}
	n := showBytes
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], len(s) - n
}

// cutLine is a stored text as dlq show prints it on one line: cut, escaped
// (escape.Line), and followed by how much was left out.
func cutLine(s string, full bool) string {
	shown, left := cut(s, full)
	if left == 0 {
		return escape.Line(shown)
	}
	return escape.Line(shown) + fmt.Sprintf(" … (%d more bytes: --full prints them)", left)
}

// dlqSelect picks the dead letters replay, discard and export act on:
// those named, those of one group (narrowed by the filters), or every one
// that matches the filters.
type dlqSelect struct {
	dbFlags
	Refs     []string `arg:"" optional:"" name:"ref" help:"relay:ID or consumer:ID, as listed by courier dlq list; leave out to select with the filters."`
	Topic    string   `help:"Select the dead letters of this topic (relay side), or whose subject ends in .TOPIC (consumer side)." env:"COURIER_DLQ_TOPIC"`
	Consumer string   `help:"Select this consumer's dead letters (consumer side only)." env:"COURIER_DLQ_CONSUMER"`
	Error    string   `help:"Select the dead letters whose last error (consumer side: or reason) contains this text, ignoring case." env:"COURIER_DLQ_ERROR"`
	Side     string   `help:"Select only relay or consumer dead letters." enum:"relay,consumer,both" default:"both" env:"COURIER_DLQ_SIDE"`
	Group    string   `help:"Select the dead letters of this group (its id, as courier dlq groups lists it); --topic, --consumer, --error and --side narrow it." env:"COURIER_DLQ_GROUP"`
	All      bool     `help:"Select every dead letter (when no ref and no filter is given)." env:"COURIER_DLQ_ALL"`
	Limit    int      `help:"At most this many of each side." default:"1000" env:"COURIER_DLQ_LIMIT"`
}

// dlqDryRun is the --dry-run of the commands that change dead letters.
type dlqDryRun struct {
	DryRun bool `help:"List what would be done and change nothing." env:"COURIER_DLQ_DRY_RUN"`
}

type dlqReplayCmd struct {
	dlqSelect
	dlqDryRun
	NewID     bool              `name:"new-id" help:"Give a consumer letter that has no message id (its headers were malformed) a new one (Nats-Msg-Id, a UUIDv7) before replaying it." env:"COURIER_DLQ_NEW_ID"`
	SetHeader map[string]string `name:"set-header" help:"Set this header (exact name) of consumer letters before replaying them, to repair malformed ones: --set-header Courier-Type=OrderPlaced. Repeatable." env:"COURIER_DLQ_SET_HEADER"`
	Wait      time.Duration     `help:"Wait up to this long for the outcome of each replay and report it (relay: published or dead again; consumer: applied or failed again); exit 1 unless all succeeded. 0: do not wait. --canary and --stop-on-failure need it." default:"0s" env:"COURIER_DLQ_WAIT"`
	Canary    int               `help:"Replay this many first, wait (--wait) for their outcome, and go on with the rest only if none failed again. 0: no canary." default:"0" env:"COURIER_DLQ_CANARY"`
	Rate      float64           `help:"Replay at most this many a second (such as 50, or 0.5 for one every 2s). 0: as fast as the database goes." default:"0" env:"COURIER_DLQ_RATE"`
	StopOn    bool              `name:"stop-on-failure" help:"Watch the outcomes while replaying (--wait: how long to watch once all are replayed) and stop when a replayed dead letter fails again, saying how many were replayed, failed and left." env:"COURIER_DLQ_STOP_ON_FAILURE"`
	Force     bool              `help:"Replay consumer letters parked longer ago than the inbox's marker retention (--retention), whose replay may apply a message twice: check first that it was not applied." env:"COURIER_DLQ_FORCE"`
	Retention time.Duration     `help:"The consumers' inbox marker retention (inbox.ConsumerConfig.Retention; default that default, 7 days): a consumer letter parked longer ago is replayed only with --force. 0 or less: markers are never deleted." default:"168h" env:"COURIER_DLQ_RETENTION"`
}

type dlqDiscardCmd struct {
	dlqSelect
	dlqDryRun
}

func (c *dbFlags) admin(e *env) (store.Admin, func(), error) {
	d, err := c.open(e.ctx, false, "")
	if err != nil {
		return nil, nil, err
	}
	if err := d.CheckSchema(e.ctx); err != nil {
		d.Close()
		return nil, nil, err
	}
	return d.Admin(), d.Close, nil
}

// Run lists summaries (store.Admin's ListDeadLetters and ListParked), a
// page at a time: no payload, no history, no header but the type, each
// text cut by the database (store.TextPreview, store.ErrorPreview).
func (c *dlqListCmd) Run(e *env) error {
	if c.Limit < 1 {
		return fmt.Errorf("--limit is %d: use 1 or more", c.Limit)
	}
	a, done, err := c.admin(e)
	if err != nil {
		return err
	}
	defer done()
	dead := []store.DeadLetterSummary{}
	if c.Consumer == "" {
		dead, err = listAll(e, a.ListDeadLetters, store.ListQuery{}, c.Limit, func(d store.DeadLetterSummary) int64 { return d.ID })
		if err != nil {
			return err
		}
	}
	parked, err := listAll(e, a.ListParked, store.ListQuery{Consumer: c.Consumer}, c.Limit, func(p store.ParkedSummary) int64 { return p.ID })
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
	// One row per letter: where it comes from (topic, or consumer and
	// subject), its type and message id, and why it is there (a delivery
	// parked behind the one that holds its key: which one).
	const row = "%-16s %-19s %-30s %-20s %-36s %-8s %s\n"
	fmt.Fprintf(e.stdout, row, "DEAD LETTER", "WHEN", "SOURCE", "TYPE", "MESSAGE ID", "ATTEMPTS", "LAST ERROR")
	for _, d := range dead {
		why := d.LastError
		if d.Holds {
			why = "(holds its key) " + why
		}
		fmt.Fprintf(e.stdout, row, "relay:"+strconv.FormatInt(d.ID, 10), d.DeadAt.UTC().Format(time.DateTime),
			clip("topic "+d.Topic, 30), clip(d.Type, 20), escape.Line(d.MessageID), strconv.Itoa(d.Attempts), clip(why, 60))
	}
	for _, p := range parked {
		id := p.MessageID
		if id == "" {
			id = "(none)"
		}
		why := p.Reason + ": " + p.Error
		if p.Behind != 0 { // its Error names the cause it was parked behind, which may have passed the hold on since
			why = "held behind consumer:" + strconv.FormatInt(p.Behind, 10)
		}
		if p.ReplayRequested != nil {
			why = "(replay asked) " + why
		}
		fmt.Fprintf(e.stdout, row, "consumer:"+strconv.FormatInt(p.ID, 10), p.ParkedAt.UTC().Format(time.DateTime),
			clip(p.Consumer+" ← "+p.Subject, 30), clip(orDash(p.Type), 20), escape.Line(id), strconv.Itoa(p.Attempts), clip(why, 60))
	}
	return nil
}

// listAll reads the first limit summaries q selects with list, a page of
// at most store.MaxListLimit at a time; id returns a summary's id.
func listAll[S any](e *env, list func(context.Context, store.ListQuery) ([]S, error), q store.ListQuery, limit int, id func(S) int64) ([]S, error) {
	out := []S{}
	for len(out) < limit {
		q.Limit = min(store.MaxListLimit, limit-len(out))
		page, err := list(e.ctx, q)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(page) < q.Limit {
			break
		}
		q.After = id(page[len(page)-1])
	}
	return out, nil
}

// orDash stands in "-" for an empty value in a table.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
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
		showDeadLetter(e, c.Ref, d, c.Full)
		if d.Holds {
			return showHeld(e, a, c.Ref, d)
		}
		return nil
	}
	p, err := a.ParkedMessage(e.ctx, id)
	if err != nil {
		return refError(c.Ref, err)
	}
	if c.JSON {
		return writeJSON(e, p)
	}
	showParked(e, c.Ref, p, c.Full)
	return nil
}

// showDeadLetter prints a relay-side dead letter for people: its fields, its
// payload, and each attempt marked "counted" (it counted against the
// message) or "broker" (the broker was unavailable; it did not count).
// Every stored text is escaped (package escape): the last error may quote
// a remote endpoint's answer. Unless full, the payload, each header and
// each error stop after showBytes.
func showDeadLetter(e *env, ref string, d store.DeadLetter, full bool) {
	w := e.stdout
	field := func(name, value string) { fmt.Fprintf(w, "%-13s %s\n", name, cutLine(value, full)) }
	field("dead letter", ref)
	field("message id", d.MessageID)
	field("topic", d.Topic)
	field("key", d.Key)
	field("type", fmt.Sprintf("%s (version %d)", d.Type, d.Version))
	field("occurred", d.OccurredAt.UTC().Format(time.RFC3339Nano))
	field("dead since", d.DeadAt.UTC().Format(time.RFC3339Nano))
	field("attempts", fmt.Sprintf("%d counted", d.Attempts))
	field("last error", d.LastError)
	for _, k := range slices.Sorted(maps.Keys(d.Headers)) {
		field("header", k+": "+d.Headers[k])
	}
	showPayload(e, d.ContentType, d.Payload, full)
	if len(d.History) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%-3s %-20s %-8s %s\n", "#", "WHEN", "COUNTED", "ERROR")
	for i, h := range d.History {
		kind := "broker"
		if h.Counted {
			kind = "counted"
		}
		fmt.Fprintf(w, "%-3d %-20s %-8s %s\n", i+1, h.At.UTC().Format(time.DateTime), kind, cutLine(h.Error, full))
	}
	fmt.Fprintln(w, "counted: counted against the message; broker: the broker was unavailable, not counted")
}

// heldShown is how many of the messages held behind a dead letter dlq
// show lists.
const heldShown = 20

// showHeld prints, after a dead letter that holds its key (ref, d), the
// first heldShown messages held behind it, oldest first, and what replay
// and discard do to them.
func showHeld(e *env, a store.Admin, ref string, d store.DeadLetter) error {
	held, err := a.ListHeld(e.ctx, d.ID, 0, heldShown)
	if err != nil {
		return err
	}
	w := e.stdout
	fmt.Fprintf(w, "\nholds its key: %d message(s) of key %s wait behind it\n", d.Held, escape.Line(d.Key))
	if len(held) > 0 {
		fmt.Fprintf(w, "%-12s %-36s %-30s %-20s %s\n", "ID", "MESSAGE ID", "TOPIC", "TYPE", "WRITTEN")
		for _, h := range held {
			fmt.Fprintf(w, "%-12d %-36s %-30s %-20s %s\n", h.ID, escape.Line(h.MessageID), clip(h.Topic, 30), clip(h.Type, 20), h.CreatedAt.UTC().Format(time.DateTime))
		}
		if n := d.Held - int64(len(held)); n > 0 {
			fmt.Fprintf(w, "and %d more\n", n)
		}
	}
	fmt.Fprintf(w, "courier dlq replay %s publishes it, then these in order; courier dlq discard %s drops it and publishes these in order\n", ref, ref)
	return nil
}

// showParked prints a consume-side dead letter for people, every stored
// text escaped (package escape): all of it came from the broker. A
// delivery of a key its consumer holds shows the key, and one parked
// behind the key's cause that cause. Unless full, the payload, each header
// and each error stop after showBytes.
func showParked(e *env, ref string, p store.Parked, full bool) {
	w := e.stdout
	field := func(name, value string) { fmt.Fprintf(w, "%-13s %s\n", name, cutLine(value, full)) }
	field("dead letter", ref)
	field("consumer", p.Consumer)
	field("message id", p.MessageID)
	field("subject", p.Subject)
	field("reason", p.Reason)
	if p.Key != "" {
		field("key", p.Key)
	}
	if p.Behind != 0 {
		field("held behind", "consumer:"+strconv.FormatInt(p.Behind, 10))
	}
	field("parked since", p.ParkedAt.UTC().Format(time.RFC3339Nano))
	if p.ReplayRequested != nil {
		field("replay asked", p.ReplayRequested.UTC().Format(time.RFC3339Nano))
	}
	field("attempts", strconv.Itoa(p.Attempts))
	field("last error", p.Error)
	for _, k := range slices.Sorted(maps.Keys(p.Headers)) {
		field("header", k+": "+strings.Join(p.Headers[k], ", "))
	}
	showPayload(e, "", p.Payload, full)
	if len(p.History) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%-3s %-20s %s\n", "#", "WHEN", "ERROR")
	for i, h := range p.History {
		fmt.Fprintf(w, "%-3d %-20s %s\n", i+1, h.At.UTC().Format(time.DateTime), cutLine(h.Error, full))
	}
}

// showPayload prints a payload as text when it is printable UTF-8 (escaped
// by escape.Text, which keeps its lines and tabs), in base64 otherwise;
// unless full, its first showBytes only, then a line that says how much
// was left out.
func showPayload(e *env, contentType string, payload []byte, full bool) {
	what := fmt.Sprintf("%d bytes", len(payload))
	if contentType != "" {
		what = escape.Line(contentType) + ", " + what
	}
	printable := utf8.Valid(payload) && !strings.ContainsFunc(string(payload), func(r rune) bool {
		return !unicode.IsPrint(r) && !unicode.IsSpace(r)
	})
	var left int
	if printable {
		var text string
		text, left = cut(string(payload), full)
		fmt.Fprintf(e.stdout, "%-13s (%s)\n%s\n", "payload", what, escape.Text(text))
	} else {
		shown := payload
		if !full && len(shown) > showBytes {
			shown, left = shown[:showBytes], len(shown)-showBytes
		}
		fmt.Fprintf(e.stdout, "%-13s (%s, base64)\n%s\n", "payload", what, base64.StdEncoding.EncodeToString(shown))
	}
	if left > 0 {
		fmt.Fprintf(e.stdout, "(payload cut: the first %d of its %d bytes are shown, %d left out; --full prints it whole, courier dlq export writes it)\n",
			len(payload)-left, len(payload), left)
	}
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

// writeJSON prints v as indented JSON, with the characters encoding/json
// leaves as they are that a terminal would act on escaped (escape.JSON).
func writeJSON(e *env, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = e.stdout.Write(append(escape.JSON(b), '\n'))
	return err
}

// clip renders s for a table column of n characters: on one line, escaped
// (escape.Line), and cut with … when longer.
func clip(s string, n int) string {
	s = escape.Line(strings.Join(strings.Fields(s), " "))
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
