package dashboard

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/courier-go/courier/failgroup"
	"github.com/courier-go/courier/store"
)

// failureRoutes are the pages of the failure groups.
func (h *Handler) failureRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /failures", h.failures)
	mux.HandleFunc("GET /failures/{group}", h.failure)
	mux.HandleFunc("GET /failures/{group}/export", h.exportFailure)
}

// groupReplay is a replay of a failure group from this dashboard, kept to
// show what became of it.
type groupReplay struct {
	At   time.Time
	Side string
	IDs  map[int64]bool
}

// keptReplays is how many group replays a dashboard remembers.
const keptReplays = 100

// replayed notes that the ids of group (of side) were replayed at at.
func (h *Handler) replayed(group, side string, ids []int64, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.replays == nil {
		h.replays = map[string]groupReplay{}
	}
	if _, ok := h.replays[group]; !ok && len(h.replays) >= keptReplays {
		oldest := ""
		for g, r := range h.replays {
			if oldest == "" || r.At.Before(h.replays[oldest].At) {
				oldest = g
			}
		}
		delete(h.replays, oldest)
	}
	set := make(map[int64]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	h.replays[group] = groupReplay{At: at, Side: side, IDs: set}
}

// aftermath is what became of a group's replay: how many of the replayed
// failures are in the group again, how many wait for their consumer to
// replay them, and how many left it (published, applied, or discarded).
type aftermath struct {
	Group                      string
	At                         time.Time
	Replayed, Again, Wait, Out int
}

// afterReplay returns the aftermath of group's last replay from this
// dashboard, if there was one; g is the group now (zero when it is gone).
func (h *Handler) afterReplay(id string, g failgroup.Group) (aftermath, bool) {
	h.mu.Lock()
	r, ok := h.replays[id]
	h.mu.Unlock()
	if !ok {
		return aftermath{}, false
	}
	a := aftermath{Group: id, At: r.At, Replayed: len(r.IDs)}
	for _, m := range g.IDs {
		if !r.IDs[m] {
			continue
		}
		if slices.Contains(g.Asked, m) {
			a.Wait++
		} else {
			a.Again++
		}
	}
	a.Out = a.Replayed - a.Again - a.Wait
	return a, true
}

// groupRow is a failure group as the pages show it.
type groupRow struct {
	failgroup.Group
	// Side is the path of the side's pages: dead-letters or parked.
	Path string
	// After is what became of its last replay from this dashboard.
	After *aftermath
}

func (h *Handler) groupRow(g failgroup.Group) groupRow {
	row := groupRow{Group: g, Path: sideOf(g.Side).path}
	if a, ok := h.afterReplay(g.ID, g); ok {
		row.After = &a
	}
	return row
}

// sideOf is the side of failgroup's side name.
func sideOf(name string) side {
	if name == failgroup.Relay {
		return relaySide
	}
	return consumerSide
}

// collect reads the failure groups of f (and of one side, unless empty).
func (h *Handler) collect(r *http.Request, f filter, sideName string) (failgroup.Report, error) {
	return failgroup.Collect(r.Context(), h.admin, failgroup.Options{Side: sideName, Max: h.cfg.Limit * 10,
		Filter: store.ListQuery{Topic: f.Topic, Consumer: f.Consumer, Error: f.Error}})
}

// failures lists the failure groups, a page of Config.PageSize at a
// time, with the groups replayed from this dashboard that are gone since.
func (h *Handler) failures(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := filterOf(q)
	sideName := q.Get("side")
	if sideName != failgroup.Relay && sideName != failgroup.Consumer {
		sideName = ""
	}
	rep, err := h.collect(r, f, sideName)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	page := pageNo(q)
	last := pages(len(rep.Groups), h.cfg.PageSize)
	from, to := window(page, h.cfg.PageSize, len(rep.Groups))
	rows := make([]groupRow, 0, to-from)
	for _, g := range rep.Groups[from:to] {
		rows = append(rows, h.groupRow(g))
	}
	var gone []aftermath
	if !f.Any() && sideName == "" {
		h.mu.Lock()
		ids := make([]string, 0, len(h.replays))
		for id := range h.replays {
			ids = append(ids, id)
		}
		h.mu.Unlock()
		for _, id := range ids {
			if _, ok := rep.Find(id); !ok {
				a, _ := h.afterReplay(id, failgroup.Group{})
				gone = append(gone, a)
			}
		}
		slices.SortFunc(gone, func(a, b aftermath) int { return b.At.Compare(a.At) })
	}
	params := url.Values{}
	for k, v := range map[string]string{"topic": f.Topic, "consumer": f.Consumer, "error": f.Error, "side": sideName} {
		if v != "" {
			params.Set(k, v)
		}
	}
	pageLink := func(n int) string {
		p := url.Values{}
		for k, v := range params {
			p[k] = v
		}
		if n > 1 {
			p.Set("page", strconv.Itoa(n))
		}
		if len(p) == 0 {
			return "/failures"
		}
		return "/failures?" + p.Encode()
	}
	data := map[string]any{"Title": "Failures", "Groups": rows, "Report": rep, "Filter": f, "SideName": sideName, "Gone": gone,
		"PageNo": page, "Pages": last, "Max": h.cfg.Limit * 10}
	if page > 1 {
		data["Prev"] = pageLink(min(page-1, last))
	}
	if to < len(rep.Groups) {
		data["Next"] = pageLink(page + 1)
	}
	h.render(w, r, "failures", data)
}

// group reads the failure group of the path's id, or fails the request.
func (h *Handler) group(w http.ResponseWriter, r *http.Request) (failgroup.Group, bool) {
	id, ok := h.pathValue(w, r, "group")
	if !ok {
		return failgroup.Group{}, false
	}
	rep, err := h.collect(r, filter{}, "")
	if err != nil {
		h.failErr(w, r, err)
		return failgroup.Group{}, false
	}
	g, ok := rep.Find(id)
	if !ok {
		msg := fmt.Sprintf("There is no failure group %q: none of the failures now has that cause.", id)
		if a, replayed := h.afterReplay(id, failgroup.Group{}); replayed {
			msg += fmt.Sprintf(" Its %d failures were replayed from this dashboard at %s UTC, and none has failed again since.", a.Replayed, when(a.At))
		}
		h.fail(w, r, http.StatusNotFound, msg+" The failures page lists the groups there are.")
		return g, false
	}
	return g, true
}

// failure shows one failure group: its cause, its members (a page of them)
// and its actions.
func (h *Handler) failure(w http.ResponseWriter, r *http.Request) {
	g, ok := h.group(w, r)
	if !ok {
		return
	}
	s := sideOf(g.Side)
	ids := g.IDs[:min(len(g.IDs), h.cfg.PageSize)]
	rows, err := h.list(r, s, store.ListQuery{IDs: ids, Limit: max(len(ids), 1)})
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	data := map[string]any{"Title": "Failure group " + g.ID, "G": h.groupRow(g), "Rows": rows,
		"More": len(g.IDs) - len(ids), "Path": s.path, "Limit": h.cfg.Limit}
	if s == relaySide {
		if data["Holds"], err = h.holdsOf(r.Context(), g.IDs); err != nil {
			h.failErr(w, r, err)
			return
		}
	}
	h.render(w, r, "failure", data)
}

// exported is one line of a failure group's export: a whole dead letter or
// parked message, with its reference.
type exported struct {
	Ref    string            `json:"ref"`
	Side   string            `json:"side"`
	Relay  *store.DeadLetter `json:"dead_letter,omitempty"`
	Parked *store.Parked     `json:"parked,omitempty"`
}

// exportFailure sends a failure group's members as JSON Lines, whole
// (payloads in base64), to download. It changes nothing.
func (h *Handler) exportFailure(w http.ResponseWriter, r *http.Request) {
	g, ok := h.group(w, r)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="courier-failures-%s.jsonl"`, g.ID))
	enc := json.NewEncoder(w)
	for _, id := range g.IDs {
		line := exported{Ref: g.Ref(id), Side: g.Side}
		var err error
		if g.Side == failgroup.Relay {
			var d store.DeadLetter
			d, err = h.admin.DeadLetter(r.Context(), id)
			line.Relay = &d
		} else {
			var p store.Parked
			p, err = h.admin.ParkedMessage(r.Context(), id)
			line.Parked = &p
		}
		if errors.Is(err, store.ErrNotFound) {
			continue // replayed or discarded meanwhile
		}
		if err != nil {
			// The status is sent already: the download's last line says it
			// ended short, and why.
			h.cfg.Logger.Error("dashboard: export a failure group", "group", g.ID, "dead_letter", line.Ref, "err", err)
			_ = enc.Encode(map[string]string{"error": fmt.Sprintf("the export ended early: %s could not be read: %v", line.Ref, err)})
			return
		}
		if err := enc.Encode(line); err != nil {
			return
		}
	}
}

// errNoGroup is groupMembers' error for a group that is not there (any
// more).
var errNoGroup = errors.New("no such failure group")

// groupMembers returns the summaries of the members of failure group id,
// which must be of side s: up to Config.Limit of them, capped true when it
// has more.
func (h *Handler) groupMembers(r *http.Request, s side, id string) (rows []row, missing []string, capped bool, err error) {
	rep, err := h.collect(r, filter{}, "")
	if err != nil {
		return nil, nil, false, err
	}
	g, ok := rep.Find(id)
	if !ok || sideOf(g.Side) != s {
		return nil, nil, false, errNoGroup
	}
	ids := g.IDs
	if len(ids) > h.cfg.Limit {
		ids, capped = ids[:h.cfg.Limit], true
	}
	for len(ids) > 0 {
		n := min(len(ids), store.MaxListLimit)
		page, err := h.list(r, s, store.ListQuery{IDs: ids[:n], Limit: n})
		if err != nil {
			return nil, nil, false, err
		}
		rows, ids = append(rows, page...), ids[n:]
	}
	return rows, nil, capped, nil
}
