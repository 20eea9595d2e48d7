package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/courier-go/courier/store"
)

// scheduledFilter is what the scheduled messages' list is filtered by.
type scheduledFilter struct{ Topic, Key string }

func scheduledFilterOf(q url.Values) scheduledFilter {
	return scheduledFilter{Topic: strings.TrimSpace(q.Get("topic")), Key: strings.TrimSpace(q.Get("key"))}
}

// Query encodes the filter as a URL query.
func (f scheduledFilter) Query() string {
	q := url.Values{}
	for k, v := range map[string]string{"topic": f.Topic, "key": f.Key} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q.Encode()
}

// Any reports whether the filter selects anything less than all.
func (f scheduledFilter) Any() bool { return f.Topic != "" || f.Key != "" }

// scheduled lists a page of the scheduled messages that wait, the next
// due first: PageSize of them after the message of the parameter after.
func (h *Handler) scheduled(w http.ResponseWriter, r *http.Request) {
	params := r.URL.Query()
	f := scheduledFilterOf(params)
	after, _ := uuid.Parse(params.Get("after"))
	msgs, err := h.admin.ListScheduled(r.Context(), store.ScheduleFilter{Topic: f.Topic, Key: f.Key, After: after, Limit: h.cfg.PageSize + 1})
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	st, err := h.ops.Status(r.Context())
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	data := map[string]any{"Title": "Scheduled messages", "Rows": msgs, "Filter": f, "Paged": after != uuid.Nil,
		"Status": st.Scheduled, "Now": st.Now}
	if len(msgs) > h.cfg.PageSize {
		msgs = msgs[:h.cfg.PageSize]
		next, _ := url.ParseQuery(f.Query())
		next.Set("after", msgs[len(msgs)-1].ID.String())
		data["Rows"], data["Next"] = msgs, "/scheduled?"+next.Encode()
	}
	h.render(w, r, "scheduled", data)
}

// scheduledIDs reads the ids of the messages a form names, at most
// Config.Limit of them, or says for the page what is wrong with them.
func (h *Handler) scheduledIDs(values []string) (ids []uuid.UUID, problem string) {
	if len(values) == 0 {
		return nil, "No scheduled message was chosen: tick one or more, then cancel."
	}
	if problem := h.tooMany(len(values)); problem != "" {
		return nil, problem
	}
	ids = make([]uuid.UUID, len(values))
	for i, v := range values {
		id, err := uuid.Parse(v)
		if err != nil {
			return nil, fmt.Sprintf("%q is not a message id.", v)
		}
		ids[i] = id
	}
	return ids, ""
}

// confirmCancel shows the scheduled messages chosen and asks to cancel
// them. It changes nothing: its button posts the cancel.
func (h *Handler) confirmCancel(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ids, problem := h.scheduledIDs(q["id"])
	if problem != "" {
		h.fail(w, r, http.StatusBadRequest, problem)
		return
	}
	rows, err := h.admin.ListScheduled(r.Context(), store.ScheduleFilter{IDs: ids, Limit: len(ids)})
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	var gone []string
	for _, id := range ids {
		if !slices.ContainsFunc(rows, func(m store.ScheduledMessage) bool { return m.ID == id }) {
			gone = append(gone, id.String())
		}
	}
	h.render(w, r, "scheduled_confirm", map[string]any{"Title": fmt.Sprintf("Cancel %d scheduled messages?", len(rows)),
		"Rows": rows, "Missing": gone, "Back": "/scheduled?" + scheduledFilterOf(q).Query()})
}

// cancelScheduled cancels the posted ids, then goes back to the list
// saying what it did.
func (h *Handler) cancelScheduled(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, http.StatusBadRequest, "The form could not be read: "+err.Error())
		return
	}
	ids, problem := h.scheduledIDs(r.PostForm["id"])
	if problem != "" {
		h.fail(w, r, http.StatusBadRequest, problem)
		return
	}
	done, due, gone, failed := 0, 0, 0, 0
	for _, id := range ids {
		err := h.admin.CancelScheduled(r.Context(), id)
		switch {
		case err == nil:
			done++
			h.cfg.Logger.Info("dashboard: cancelled a scheduled message", "message_id", id, "remote", r.RemoteAddr)
		case errors.Is(err, store.ErrAlreadyDue):
			due++
		case errors.Is(err, store.ErrNotScheduled):
			gone++
		default:
			failed++
			h.cfg.Logger.Error("dashboard: cancel a scheduled message", "message_id", id, "err", err)
		}
	}
	h.backTo(w, r, "/scheduled", flash{code: "cancelled", done: done, due: due, gone: gone, failed: failed})
}
