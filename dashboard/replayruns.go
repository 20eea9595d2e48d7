package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/courier-go/courier/replayguard"
	"github.com/courier-go/courier/store"
)

// runRoutes are the page of replay runs.
func (h *Handler) runRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /runs", h.runs)
}

// groupCount is a failure group's share of a selection.
type groupCount struct {
	ID    string
	Count int
}

// replayPreview is what the confirmation of a replay adds to the rows it
// lists: their failure groups with counts, and those parked longer ago
// than the inbox's retention (consumer side), which the replay refuses
// unless the operator ticks "replay anyway". nil for other actions.
func (h *Handler) replayPreview(s side, action string, rows []row) map[string]any {
	if action != "replay" {
		return nil
	}
	var groups []groupCount
	at := map[string]int{}
	var stale []string
	now := h.cfg.Clock.Now()
	for _, one := range rows {
		i, ok := at[one.Group]
		if !ok {
			i = len(groups)
			at[one.Group] = i
			groups = append(groups, groupCount{ID: one.Group})
		}
		groups[i].Count++
		if l := h.letterOf(s, one); replayguard.Stale(l, now, h.cfg.InboxRetention) {
			stale = append(stale, fmt.Sprintf("%s (parked %s ago)", one.Ref, replayguard.Age(now.Sub(one.When))))
		}
	}
	return map[string]any{"Groups": groups, "Stale": stale, "Retention": replayguard.Age(h.cfg.InboxRetention)}
}

// letterOf is a row as a guarded replay takes it.
func (h *Handler) letterOf(s side, one row) replayguard.Letter {
	return replayguard.Letter{Ref: one.Ref, Relay: s == relaySide, ID: one.ID, MessageID: one.Message, Consumer: one.Consumer, ParkedAt: one.When}
}

// guardedReplay handles a posted replay when it needs more than the plain
// one: it refuses (409) a consumer-side replay of messages parked longer
// ago than Config.InboxRetention unless the form's force box is ticked,
// and runs a replay with guards (canary, rate, stop on failure) in the
// dashboard's process, recorded in the database (store.ReplayRuns),
// redirecting to the runs page. It reports whether it answered the
// request; false leaves it to the plain replay.
func (h *Handler) guardedReplay(w http.ResponseWriter, r *http.Request, s side) bool {
	guard, err := guardOptions(r)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return true
	}
	ids := make([]int64, 0, len(r.PostForm["id"]))
	for _, v := range r.PostForm["id"] {
		if id, err := strconv.ParseInt(v, 10, 64); err == nil {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return false // the plain replay says what is wrong
	}
	rows, err := h.list(r, s, store.ListQuery{IDs: ids, Limit: len(ids)})
	if err != nil {
		h.failErr(w, r, err)
		return true
	}
	letters := make([]replayguard.Letter, len(rows))
	for i, one := range rows {
		letters[i] = h.letterOf(s, one)
	}
	force := r.PostFormValue("force") == "1"
	if err := replayguard.CheckRetention(letters, h.cfg.Clock.Now(), h.cfg.InboxRetention, force, `the "replay anyway" box`); err != nil {
		h.fail(w, r, http.StatusConflict, err.Error()+".")
		return true
	}
	if !guard.Guarded() || len(letters) == 0 {
		return false
	}
	sel := fmt.Sprintf("dashboard: %d %s", len(letters), strings.ToLower(s.title))
	if g := r.PostFormValue("group"); g != "" {
		sel += " of group " + g
	}
	sel += "; " + guard.Describe()
	runs := h.cfg.Database.ReplayRuns()
	id, err := runs.StartRun(r.Context(), store.ReplayRun{Side: s.ref, Selection: sel, Total: len(letters), Note: "started"})
	if err != nil {
		h.failErr(w, r, err)
		return true
	}
	run := &replayguard.Run{Letters: letters, Options: guard, Runs: runs, RunID: id, Side: s.ref, Selection: sel,
		Replay: func(ctx context.Context, l replayguard.Letter) error {
			if l.Relay {
				return h.admin.ReplayDeadLetter(ctx, l.ID)
			}
			return h.admin.RequestReplay(ctx, l.ID)
		},
		Outcome: replayguard.DatabaseOutcome(h.cfg.Database)}
	remote := r.RemoteAddr
	h.cfg.Logger.Info("dashboard: replay run started", "run", id, "dead_letters", len(letters), "guards", guard.Describe(), "remote", remote)
	// The run outlives the request: it goes on in the dashboard's
	// process, and its progress is in the database for every dashboard.
	go func() {
		res, err := run.Do(context.Background())
		h.cfg.Logger.Info("dashboard: replay run ended", "run", id, "state", res.State, "note", res.Note, "err", err)
	}()
	http.Redirect(w, r, h.cfg.Prefix+"/runs?"+flash{code: "started", done: int(id)}.query(), http.StatusSeeOther)
	return true
}

// recordReplay records a replay without guards, done at once, as a run
// (store.ReplayRuns) that the runs pages and courier dlq runs show: done
// replayed, gone no longer there, failed refused by an error (the run then
// failed). A failure to record it is logged; the replay stands.
func (h *Handler) recordReplay(r *http.Request, s side, done, gone, failed int) {
	n := done + gone + failed
	sel := fmt.Sprintf("dashboard: %d %s", n, strings.ToLower(s.title))
	if g := r.PostFormValue("group"); g != "" {
		sel += " of group " + g
	}
	note := fmt.Sprintf("replayed %d", done)
	if gone > 0 {
		note += fmt.Sprintf("; %d no longer existed", gone)
	}
	if failed > 0 {
		note += fmt.Sprintf("; %d could not be replayed (the dashboard's log says why)", failed)
	}
	state := store.RunDone
	if failed > 0 {
		state = store.RunFailed
	}
	runs := h.cfg.Database.ReplayRuns()
	id, err := runs.StartRun(r.Context(), store.ReplayRun{Side: s.ref, Selection: sel, Total: n, Note: note})
	if err == nil {
		err = runs.FinishRun(r.Context(), id, state, done, 0, note)
	}
	if err != nil {
		h.cfg.Logger.Error("dashboard: record the replay run", "err", err)
	}
}

// guardOptions reads the guards of a posted replay: canary (a count),
// rate (per second), stop_on_failure (1) and wait (a duration such as
// 1m, how long to wait for outcomes; default 1m when a guard needs it).
func guardOptions(r *http.Request) (replayguard.Options, error) {
	var o replayguard.Options
	if v := strings.TrimSpace(r.PostFormValue("canary")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return o, fmt.Errorf("canary is %q: give a whole number of dead letters to replay first, or 0", v)
		}
		o.Canary = n
	}
	if v := strings.TrimSpace(r.PostFormValue("rate")); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return o, fmt.Errorf("rate is %q: give replays per second, such as 50 or 0.5, or 0 for no limit", v)
		}
		o.Rate = f
	}
	o.StopOnFailure = r.PostFormValue("stop_on_failure") == "1"
	if v := strings.TrimSpace(r.PostFormValue("wait")); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return o, fmt.Errorf("wait is %q: give a duration such as 30s or 2m", v)
		}
		o.Wait = d
	} else if o.Canary > 0 || o.StopOnFailure {
		o.Wait = time.Minute
	}
	if err := o.Check(); err != nil {
		// Check names the CLI's flags; the form's fields bear the
		// same names.
		return o, errors.New(fieldNames.Replace(err.Error()))
	}
	return o, nil
}

// fieldNames turns the flags replayguard's errors name into the fields of
// the replay confirmation's form.
var fieldNames = strings.NewReplacer("--canary", "Canary", "--rate", "Rate", "--stop-on-failure", "Stop on failure", "--wait", "Wait")

// runs lists the replay runs the database keeps, newest first, a page
// at a time (before: the last id of the page before).
func (h *Handler) runs(w http.ResponseWriter, r *http.Request) {
	var before int64
	if v := r.URL.Query().Get("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			h.fail(w, r, http.StatusBadRequest, "before is not a run's id: follow the page's links.")
			return
		}
		before = n
	}
	list, err := h.cfg.Database.ReplayRuns().ListRuns(r.Context(), before, h.cfg.PageSize)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	next := ""
	if len(list) == h.cfg.PageSize {
		next = "/runs?before=" + strconv.FormatInt(list[len(list)-1].ID, 10)
	}
	h.render(w, r, "runs", map[string]any{"Title": "Replay runs", "Runs": list, "Next": next, "Paged": before > 0})
}
