package dashboard

import (
	"net/http"
	"slices"

	"github.com/courier-go/courier/audit"
	"github.com/courier-go/courier/internal/escape"
	"github.com/courier-go/courier/store"
)

// deliveryRoutes are the page of the continuous audits.
func (h *Handler) deliveryRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /delivery", h.delivery)
}

// watchView is a continuous audit as the Delivery page shows it.
type watchView struct {
	store.AuditWatch
	// State is the watch's state in a word: ok, findings, failing or
	// stopped.
	State string
	// Judged is the length of the range it has judged; Lag how far
	// behind now that range ends; Updated how long ago it saved its
	// state (rendered).
	Judged, Lag, Updated string
	// Latest are its latest findings, newest first; Undecodable says
	// why they could not be read.
	Latest      []audit.WatchFinding
	Undecodable string
	// Advice is what to do about each kind it found.
	Advice []kindAdvice
}

// kindAdvice is one kind of finding a watch found, with what to do.
type kindAdvice struct {
	Kind, Title, Advice string
	Count               int64
	Alarm               bool
}

// delivery shows each continuous audit the database keeps (courier audit
// --watch, courier relay --audit): the range judged, its lag, what it
// found and what to do about it, and whether it stopped or fails; those
// that found alarms first. What
// the database holds is escaped twice: control characters as the
// terminal's commands show them (escape.Line), markup by the template.
func (h *Handler) delivery(w http.ResponseWriter, r *http.Request) {
	ws, err := h.cfg.Database.Delivery().Watches(r.Context())
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	now := h.cfg.Clock.Now()
	views := make([]watchView, 0, len(ws))
	alarms := false
	for _, s := range ws {
		v := watchView{AuditWatch: s, State: "ok", Judged: "-", Lag: "-", Updated: ago(now.Sub(s.UpdatedAt))}
		if !s.To.IsZero() {
			v.Judged, v.Lag = ago(s.To.Sub(s.From)), ago(now.Sub(s.To))
		}
		switch {
		case audit.Stopped(s, now):
			v.State = "stopped"
		case s.LastError != "":
			v.State = "failing"
		case s.Alarms():
			v.State = "findings"
		}
		alarms = alarms || s.Alarms()
		fs, err := audit.SavedFindings(s)
		if err != nil {
			v.Undecodable = err.Error()
		}
		slices.Reverse(fs)
		for i := range fs {
			f := &fs[i].Finding
			for _, s := range []*string{&f.MessageID, &f.Topic, &f.Key, &f.Type, &f.Log, &f.Detail} {
				*s = escape.Line(*s)
			}
		}
		v.Latest = fs
		v.Name, v.Broker, v.LastError = escape.Line(s.Name), escape.Line(s.Broker), escape.Line(s.LastError)
		counts := map[string]int64{audit.KindLost: s.Lost, audit.KindPhantom: s.Phantoms, audit.KindOrderBreak: s.OrderBreaks, audit.KindDuplicate: s.Duplicates}
		for _, k := range audit.Kinds {
			if counts[k] > 0 {
				v.Advice = append(v.Advice, kindAdvice{Kind: k, Title: audit.Title(k), Advice: audit.Advice(k), Count: counts[k], Alarm: audit.IsAlarm(k)})
			}
		}
		views = append(views, v)
	}
	// Those that found alarms first, then by name.
	slices.SortStableFunc(views, func(a, b watchView) int {
		switch {
		case a.Alarms() == b.Alarms():
			return 0
		case a.Alarms():
			return -1
		}
		return 1
	})
	h.render(w, r, "delivery", map[string]any{"Title": "Delivery", "Watches": views, "Alarms": alarms})
}
