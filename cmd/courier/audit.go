package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/courier-go/courier/audit"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/brokerurl"
	"github.com/courier-go/courier/internal/escape"
	"github.com/courier-go/courier/store/dburl"
)

type auditCmd struct {
	dbFlags
	BrokerURL        string        `name:"broker-url" required:"" help:"Broker to read back: nats://host:4222 (the stream of --stream) or kafka://host:9092 (the topics of --topic). RabbitMQ queues and webhook endpoints keep no copy to read." env:"COURIER_BROKER_URL"`
	Stream           string        `help:"JetStream stream the relays publish into (NATS)." default:"COURIER" env:"COURIER_STREAM"`
	SubjectPrefix    string        `help:"Prefix that turns a topic into a subject (NATS), as the relays were given it." default:"courier." env:"COURIER_SUBJECT_PREFIX"`
	KeySubjects      bool          `name:"key-subjects" help:"Subjects end with the message's key (NATS), as the relays were given it." env:"COURIER_KEY_SUBJECTS"`
	Topic            []string      `name:"topic" help:"Kafka topics to read (required for Kafka; repeat or separate with commas)." env:"COURIER_AUDIT_TOPICS"`
	Since            time.Duration `help:"Audit what was published this long before --until." default:"1h" env:"COURIER_AUDIT_SINCE"`
	From             string        `help:"Start of the window, RFC 3339 (such as 2026-12-03T17:00:00Z); instead of --since." env:"COURIER_AUDIT_FROM"`
	Until            string        `help:"End of the window, RFC 3339 (default: --slack ago, so that what the broker has just stored has its copy recorded)." env:"COURIER_AUDIT_UNTIL"`
	Slack            time.Duration `help:"How far beyond the window each side is read: a message's copy is recorded after the broker stored it, on another clock (default: 1m; 5s with --watch, whose passes read what is new)." env:"COURIER_AUDIT_SLACK"`
	Examples         int           `help:"Messages listed for each kind of finding (all are counted)." default:"20" env:"COURIER_AUDIT_EXAMPLES"`
	FailOnDuplicates bool          `name:"fail-on-duplicates" help:"Exit 1 on duplicates too (by default only lost messages, phantoms and order breaks do)." env:"COURIER_AUDIT_FAIL_ON_DUPLICATES"`
	JSON             bool          `help:"Print JSON instead of tables." env:"COURIER_JSON"`
	watchCmdFlags
}

// errAudit is returned when the audit found what it alarms on.
var errAudit = errors.New("the audit found messages that do not match")

// window returns the audit's window from the flags.
func (c *auditCmd) window(now time.Time) (from, to time.Time, err error) {
	to = now.Add(-c.Slack)
	if c.Until != "" {
		if to, err = time.Parse(time.RFC3339Nano, c.Until); err != nil {
			return from, to, fmt.Errorf("--until %q is not an RFC 3339 time: write it as 2026-12-03T18:00:00Z", c.Until)
		}
	}
	if c.From != "" {
		if from, err = time.Parse(time.RFC3339Nano, c.From); err != nil {
			return from, to, fmt.Errorf("--from %q is not an RFC 3339 time: write it as 2026-12-03T17:00:00Z", c.From)
		}
	} else {
		if c.Since <= 0 {
			return from, to, fmt.Errorf("--since is %s: use a positive duration, such as 1h", c.Since)
		}
		from = to.Add(-c.Since)
	}
	if !from.Before(to) {
		return from, to, fmt.Errorf("the window starts at %s, not before its end %s: check --from, --since and --until",
			from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
	}
	return from, to, nil
}

func (c *auditCmd) Run(e *env) error {
	if c.Slack < 0 || c.Examples < 0 {
		return fmt.Errorf("--slack is %s and --examples %d: use 0 or more", c.Slack, c.Examples)
	}
	if c.Watch {
		return c.runWatch(e)
	}
	if c.Slack == 0 {
		c.Slack = audit.DefaultSlack
	}
	from, to, err := c.window(time.Now())
	if err != nil {
		return err
	}
	opts := c.brokerOptions(e)
	u, err := brokerurl.Parse(c.BrokerURL, opts)
	if err != nil {
		return err
	}
	if err := u.CanReadBack(); err != nil {
		return fmt.Errorf("cannot audit %s: %w", u.Where, err)
	}
	d, b, r, closeSides, err := c.sides(e, opts, splitList(c.Topic))
	if err != nil {
		return err
	}
	defer closeSides()
	rep, err := audit.Run(e.ctx, d.Operations(), r, audit.Config{From: from, To: to, Slack: c.Slack, Examples: c.Examples})
	if err != nil {
		return err
	}
	if c.JSON {
		for _, fs := range []*audit.Findings{&rep.Lost, &rep.Phantoms, &rep.Duplicates, &rep.OrderBreaks, &rep.Foreign} {
			nonNil(&fs.Examples)
		}
		if err := writeJSON(e, rep); err != nil {
			return err
		}
	} else {
		printAudit(e.stdout, rep, b.String(), d.String())
	}
	if rep.Alarms() || (c.FailOnDuplicates && rep.Duplicates.Count > 0) {
		return fmt.Errorf("%w: %d lost, %d phantoms, %d order breaks, %d duplicates (see above)", errAudit,
			rep.Lost.Count, rep.Phantoms.Count, rep.OrderBreaks.Count, rep.Duplicates.Count)
	}
	return nil
}

// sides opens what an audit compares: the database, its schema checked,
// and a reader of the broker's topics (NATS: the stream). closeSides
// closes both.
func (c *auditCmd) sides(e *env, opts brokerurl.Options, topics []string) (d *dburl.DB, b *brokerurl.Broker, r broker.Reader, closeSides func(), err error) {
	if d, err = c.open(e.ctx, false, ""); err != nil {
		return nil, nil, nil, nil, err
	}
	if err = d.CheckSchema(e.ctx); err == nil {
		if b, err = brokerurl.Open(e.ctx, c.BrokerURL, opts); err == nil {
			if r, err = b.Reader(e.ctx, topics); err == nil {
				return d, b, r, func() { b.Close(); d.Close() }, nil
			}
			b.Close()
		}
	}
	d.Close()
	return nil, nil, nil, nil, err
}

// splitList splits the values of a repeatable flag at commas too.
func splitList(values []string) []string {
	var out []string
	for _, v := range values {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}

// printAudit prints rep for people: the counts, then the findings.
func printAudit(w io.Writer, rep *audit.Report, brokerName, database string) {
	ts := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	fmt.Fprintf(w, "audit of %s against %s\n", escape.Line(brokerName), escape.Line(database))
	fmt.Fprintf(w, "window  %s to %s (each side read %s beyond it)\n", ts(rep.From), ts(rep.To), rep.Slack)
	for _, why := range rep.Narrowed {
		fmt.Fprintf(w, "        narrowed: %s\n", escape.Line(why))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(name string, n int, what string) { fmt.Fprintf(tw, "  %s\t%d\t%s\n", name, n, what) }
	row("published", rep.Published, "copies the database recorded in the window")
	row("stored", rep.Stored, "Courier messages the broker stored in the window")
	row("lost", rep.Lost.Count, "published per the database, not on the broker")
	row("phantoms", rep.Phantoms.Count, "on the broker, unknown to the database")
	row("order breaks", rep.OrderBreaks.Count, "on the broker after a later message of their key")
	row("duplicates", rep.Duplicates.Count, "extra copies on the broker (inboxes apply a message once)")
	row("pending", rep.Pending, "on the broker, not recorded as published yet (will be published again)")
	row("dead letters", rep.DeadLetters, "on the broker, and dead letters in the database")
	row("elsewhen", rep.PublishedElsewhen, "on the broker, recorded as published more than the slack away")
	row("not Courier's", rep.Foreign.Count, "on the broker, without a Courier message id")
	_ = tw.Flush()
	for _, k := range []struct {
		title string
		fs    audit.Findings
	}{{"Lost", rep.Lost}, {"Phantoms", rep.Phantoms}, {"Order breaks", rep.OrderBreaks}, {"Duplicates", rep.Duplicates}, {"Not Courier's", rep.Foreign}} {
		if len(k.fs.Examples) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s (%d of %d):\n", k.title, len(k.fs.Examples), k.fs.Count)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  MESSAGE ID\tTOPIC\tKEY\tTYPE\tDATABASE\tBROKER\tDETAIL")
		for _, f := range k.fs.Examples {
			db, br := "-", "-"
			if f.ID != 0 {
				db = "id " + strconv.FormatInt(f.ID, 10) + " at " + ts(f.PublishedAt)
			}
			if f.Log != "" {
				br = clip(f.Log, 30) + "@" + strconv.FormatInt(f.Offset, 10) + " at " + ts(f.StoredAt)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\n", orDash(escape.Line(f.MessageID)), clip(f.Topic, 30), clip(f.Key, 30),
				clip(f.Type, 20), db, br, clip(orDash(f.Detail), 60))
		}
		_ = tw.Flush()
	}
}
