package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/courier-go/courier/audit"
	"github.com/courier-go/courier/internal/escape"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/dburl"
)

// auditStatusFlags are `courier status`'s flags of the continuous audits.
type auditStatusFlags struct {
	FailIfAuditFinding bool `name:"fail-if-audit-finding" help:"Exit 1 when a continuous audit (courier audit --watch, courier relay --audit) has found lost messages, phantoms or order breaks (courier audit --watch --reset clears them once dealt with)." env:"COURIER_FAIL_IF_AUDIT_FINDING"`
	FailIfAuditStopped bool `name:"fail-if-audit-stopped" help:"Exit 1 when a continuous audit has saved nothing for 3 of its intervals (it stopped) or its last pass failed." env:"COURIER_FAIL_IF_AUDIT_STOPPED"`
}

// watchStatus is one continuous audit as `courier status` shows it.
type watchStatus struct {
	store.AuditWatch
	// JudgedS is the length of the range judged (To − From).
	JudgedS float64 `json:"judged_seconds"`
	// LagS is how far behind the status's now the judged range ends.
	LagS float64 `json:"lag_seconds"`
	// UpdatedAgoS is how long ago the watch last saved its state.
	UpdatedAgoS float64 `json:"updated_ago_seconds"`
	// Stopped is true when it saved nothing for 3 intervals.
	Stopped bool `json:"stopped"`
	// Alarms is true when it found lost messages, phantoms or order
	// breaks.
	Alarms bool `json:"alarms"`
}

// readWatches reads the continuous audits' saved states, judged at now
// (the database's clock).
func readWatches(ctx context.Context, d *dburl.DB, now time.Time) ([]watchStatus, error) {
	ws, err := d.Delivery().Watches(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the continuous audits: %w", err)
	}
	out := make([]watchStatus, 0, len(ws))
	for _, w := range ws {
		out = append(out, newWatchStatus(w, now))
	}
	return out, nil
}

// newWatchStatus judges the saved watch w at now.
func newWatchStatus(w store.AuditWatch, now time.Time) watchStatus {
	s := watchStatus{AuditWatch: w, Alarms: w.Alarms(), UpdatedAgoS: max(now.Sub(w.UpdatedAt), 0).Seconds()}
	if !w.To.IsZero() {
		s.JudgedS = w.To.Sub(w.From).Seconds()
		s.LagS = max(now.Sub(w.To), 0).Seconds()
	}
	s.Stopped = audit.Stopped(w, now)
	return s
}

// state is the watch's state in a word.
func (s watchStatus) state() string {
	switch {
	case s.Stopped:
		return "STOPPED"
	case s.LastError != "":
		return "FAILING"
	case s.Alarms:
		return "FINDINGS"
	}
	return "ok"
}

// auditChecks returns a message for each --fail-if-audit-… check that
// fails on ws.
func (f auditStatusFlags) auditChecks(ws []watchStatus) []string {
	var failed []string
	for _, w := range ws {
		name := escape.Line(w.Name)
		if f.FailIfAuditFinding && w.Alarms {
			failed = append(failed, fmt.Sprintf("continuous audit %s found %d lost, %d phantoms, %d order breaks: see the dashboard's Delivery page or courier status for the messages and what to do",
				name, w.Lost, w.Phantoms, w.OrderBreaks))
		}
		if f.FailIfAuditStopped && w.Stopped {
			failed = append(failed, fmt.Sprintf("continuous audit %s saved nothing for %s (interval %s): is courier audit --watch (or courier relay --audit) running?",
				name, time.Duration(w.UpdatedAgoS*float64(time.Second)).Round(time.Second), w.Interval))
		} else if f.FailIfAuditStopped && w.LastError != "" {
			failed = append(failed, fmt.Sprintf("continuous audit %s: its last pass failed: %s", name, escape.Line(w.LastError)))
		}
	}
	return failed
}

// printWatches writes the continuous audits as a table, then what each
// that found alarms found, with what to do; nothing when there are none.
// What the database holds is escaped for the terminal.
func printWatches(w io.Writer, ws []watchStatus) {
	if len(ws) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTINUOUS AUDITS\tstate\tjudged\tlag\tpasses\tfailed\tlost\tphantoms\torder breaks\tduplicates\tupdated\tbroker")
	for _, s := range ws {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", escape.Line(s.Name), s.state(),
			seconds(s.JudgedS), seconds(s.LagS), s.Passes, s.Failed, s.Lost, s.Phantoms, s.OrderBreaks, s.Duplicates,
			seconds(s.UpdatedAgoS)+" ago", clip(s.Broker, 50))
	}
	_ = tw.Flush()
	for _, s := range ws {
		if s.LastError != "" {
			fmt.Fprintf(w, "  %s: last pass failed: %s\n", escape.Line(s.Name), escape.Line(s.LastError))
		}
		if !s.Alarms {
			continue
		}
		findings, _ := audit.SavedFindings(s.AuditWatch)
		fmt.Fprintf(w, "  %s found:\n", escape.Line(s.Name))
		for _, k := range audit.Kinds {
			n := map[string]int64{audit.KindLost: s.Lost, audit.KindPhantom: s.Phantoms, audit.KindOrderBreak: s.OrderBreaks}[k]
			if n == 0 {
				continue
			}
			fmt.Fprintf(w, "    %s (%d): %s\n", audit.Title(k), n, audit.Advice(k))
			for _, f := range findings {
				if f.Kind == k {
					fmt.Fprintf(w, "      message %s topic %s key %s %s\n", orDash(escape.Line(f.MessageID)), clip(f.Topic, 30), clip(f.Key, 30), clip(orDash(f.Detail), 60))
				}
			}
		}
	}
}

// seconds renders a count of seconds as a duration.
func seconds(s float64) string {
	if s == 0 {
		return "0s"
	}
	return age(time.Duration(s * float64(time.Second)))
}
