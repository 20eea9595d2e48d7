package main

import (
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier/internal/escape"
	"github.com/courier-go/courier/store"
)

// scheduledCmd groups the commands on scheduled messages (outbox.Writer's
// Schedule): those that wait to fall due.
type scheduledCmd struct {
	List   scheduledListCmd   `cmd:"" help:"List the scheduled messages that wait, the next due first."`
	Cancel scheduledCancelCmd `cmd:"" help:"Cancel scheduled messages by id, so that they are never published."`
}

type scheduledListCmd struct {
	dbFlags
	Topic     string        `help:"Only the messages of this topic." env:"COURIER_SCHEDULED_TOPIC"`
	Key       string        `help:"Only the messages of this key." env:"COURIER_SCHEDULED_KEY"`
	DueWithin time.Duration `name:"due-within" help:"Only the messages due within this time from now, e.g. 1h (0: all)." env:"COURIER_SCHEDULED_DUE_WITHIN"`
	After     string        `help:"Start after this message id (the last of the previous page)." env:"COURIER_SCHEDULED_AFTER"`
	Limit     int           `help:"At most this many messages (1 to 1000)." default:"100" env:"COURIER_SCHEDULED_LIMIT"`
	JSON      bool          `help:"Print JSON instead of a table." env:"COURIER_JSON"`
}

type scheduledCancelCmd struct {
	dbFlags
	IDs []string `arg:"" name:"id" help:"Message ids, as listed by courier scheduled list."`
}

func (c *scheduledListCmd) Run(e *env) error {
	f := store.ScheduleFilter{Topic: c.Topic, Key: c.Key, Limit: c.Limit}
	switch {
	case c.DueWithin < 0:
		return fmt.Errorf("--due-within is %s: use a positive duration such as 1h, or leave it out", c.DueWithin)
	case c.Limit < 1 || c.Limit > store.MaxListLimit:
		return fmt.Errorf("--limit is %d: use 1 to %d", c.Limit, store.MaxListLimit)
	}
	if c.After != "" {
		id, err := uuid.Parse(c.After)
		if err != nil {
			return fmt.Errorf("--after %q is not a message id: give the id of the last message of the previous page", escape.Line(c.After))
		}
		f.After = id
	}
	if c.DueWithin > 0 {
		f.DueBefore = time.Now().Add(c.DueWithin)
	}
	a, done, err := c.admin(e)
	if err != nil {
		return err
	}
	defer done()
	msgs, err := a.ListScheduled(e.ctx, f)
	if err != nil {
		return err
	}
	if c.JSON {
		if msgs == nil {
			msgs = []store.ScheduledMessage{}
		}
		return writeJSON(e, msgs)
	}
	if len(msgs) == 0 {
		fmt.Fprintln(e.stdout, "no scheduled messages wait")
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MESSAGE ID\tDUE\tTOPIC\tKEY\tTYPE\tSIZE\tSCHEDULED")
	now := time.Now()
	for _, m := range msgs {
		fmt.Fprintf(tw, "%s\t%s (%s)\t%s\t%s\t%s\t%d\t%s\n", m.ID, m.Due.UTC().Format(time.DateTime), relative(now, m.Due),
			clip(m.Topic, 30), clip(m.Key, 30), clip(m.Type, 30), m.Size, m.Created.UTC().Format(time.DateTime))
	}
	if len(msgs) == f.Limit {
		fmt.Fprintf(tw, "(more may follow: --after %s)\n", msgs[len(msgs)-1].ID)
	}
	return tw.Flush()
}

func (c *scheduledCancelCmd) Run(e *env) error {
	ids := make([]uuid.UUID, len(c.IDs))
	for i, s := range c.IDs {
		id, err := uuid.Parse(s)
		if err != nil {
			return fmt.Errorf("%q is not a message id: give the ids courier scheduled list shows", escape.Line(s))
		}
		ids[i] = id
	}
	a, done, err := c.admin(e)
	if err != nil {
		return err
	}
	defer done()
	failed := 0
	for _, id := range ids {
		err := a.CancelScheduled(e.ctx, id)
		switch {
		case err == nil:
			fmt.Fprintf(e.stdout, "%s cancelled: it will not be published\n", id)
		case errors.Is(err, store.ErrAlreadyDue):
			failed++
			fmt.Fprintf(e.stdout, "%s not cancelled: it fell due already and is published, or being published\n", id)
		case errors.Is(err, store.ErrNotScheduled):
			failed++
			fmt.Fprintf(e.stdout, "%s not cancelled: no scheduled message has this id (never scheduled, cancelled already, or released long ago)\n", id)
		default:
			return err
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d not cancelled", failed, len(ids))
	}
	return nil
}
