package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/courier-go/courier/store"
)

// heldRoutes are the pages of the held keys.
func (h *Handler) heldRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /held-keys", h.heldKeys)
}

// heldRow is a held key as the list shows it.
type heldRow struct {
	store.HeldKey
	// Ref is its cause's reference, as the CLI names it (relay:ID).
	Ref string
}

// heldKeys lists a page of the held keys: PageSize of them whose cause's
// id is above the parameter after, filtered by the topic and error text of
// their cause, as the list of dead letters is, with a link to the next
// page.
func (h *Handler) heldKeys(w http.ResponseWriter, r *http.Request) {
	params := r.URL.Query()
	f := filterOf(params)
	f.Consumer = "" // a relay-side list: no consumer to filter by
	q := f.query()
	q.After, _ = strconv.ParseInt(params.Get("after"), 10, 64)
	q.Limit = h.cfg.PageSize + 1
	keys, err := h.admin.HeldKeys(r.Context(), q)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	rows := make([]heldRow, len(keys))
	for i, k := range keys {
		rows[i] = heldRow{HeldKey: k, Ref: "relay:" + strconv.FormatInt(k.Cause, 10)}
	}
	data := map[string]any{"Title": "Held keys", "Rows": rows, "Filter": f, "Paged": q.After > 0}
	if len(rows) > h.cfg.PageSize {
		rows = rows[:h.cfg.PageSize]
		next, _ := url.ParseQuery(f.Query()) // encoded by Query: it parses
		next.Set("after", strconv.FormatInt(rows[len(rows)-1].Cause, 10))
		data["Rows"], data["Next"] = rows, "/held-keys?"+next.Encode()
	}
	h.render(w, r, "held", data)
}

// heldBehind adds to the data of dead letter d's page, when d holds its
// key, the first PageSize messages held behind it (HeldList) and how many
// more there are (HeldMore).
func (h *Handler) heldBehind(ctx context.Context, d store.DeadLetter, data map[string]any) error {
	if !d.Holds {
		return nil
	}
	held, err := h.admin.ListHeld(ctx, d.ID, 0, h.cfg.PageSize)
	if err != nil {
		return err
	}
	data["HeldList"], data["HeldMore"] = held, max(d.Held-int64(len(held)), 0)
	return nil
}

// groupHolds is what a failure group's relay-side members hold: how many
// of them hold their key, and how many messages wait behind them.
type groupHolds struct {
	Keys, Held int64
}

// holdsOf reads what the dead letters ids hold, MaxListLimit of them at a
// time.
func (h *Handler) holdsOf(ctx context.Context, ids []int64) (groupHolds, error) {
	var g groupHolds
	for len(ids) > 0 {
		n := min(len(ids), store.MaxListLimit)
		keys, err := h.admin.HeldKeys(ctx, store.ListQuery{IDs: ids[:n], Limit: n})
		if err != nil {
			return g, err
		}
		for _, k := range keys {
			g.Keys++
			g.Held += k.Held
		}
		ids = ids[n:]
	}
	return g, nil
}

// heldExplain is what a confirmation of action (replay or discard) on
// rows adds about those of them that hold their key: "" when none does.
func heldExplain(rows []row, action string) string {
	n := 0
	for _, r := range rows {
		if r.Holds {
			n++
		}
	}
	if n == 0 {
		return ""
	}
	holds, each := fmt.Sprintf("%d of them hold their key", n), "each"
	if n == 1 {
		holds, each = "1 of them holds its key", "it"
	}
	if action == "discard" {
		return fmt.Sprintf(" %s: deleting %s lets its key move on, and the messages held behind it go back into the outbox, in order, and are published.", holds, each)
	}
	return fmt.Sprintf(" %s: %s is published first, then the messages held behind it, in order.", holds, each)
}
