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

// consumerHoldRow is a key a consumer holds as the list shows it.
type consumerHoldRow struct {
	store.ConsumerHold
	// Ref is its cause's reference, as the CLI names it (consumer:ID).
	Ref string
}

// heldKeys lists a page of the keys dead letters hold (relay side) and a
// page of the keys consumers hold: PageSize of each whose cause's id is
// above the parameter after (relay side) and cafter (consumer side),
// filtered by the topic and error text of their cause (and, consumer
// side, the consumer), as the lists of dead letters are, with a link to
// each list's next page that keeps the other list's page.
func (h *Handler) heldKeys(w http.ResponseWriter, r *http.Request) {
	params := r.URL.Query()
	f := filterOf(params)
	relayFilter := f
	relayFilter.Consumer = "" // a relay-side list: no consumer to filter by
	q := relayFilter.query()
	q.After, _ = strconv.ParseInt(params.Get("after"), 10, 64)
	q.Limit = h.cfg.PageSize + 1
	cq := f.query()
	cq.After, _ = strconv.ParseInt(params.Get("cafter"), 10, 64)
	cq.Limit = h.cfg.PageSize + 1
	var (
		keys  []store.HeldKey
		holds []store.ConsumerHold
		err   error
	)
	if f.Consumer == "" { // a filter by consumer selects no dead letter
		keys, err = h.admin.HeldKeys(r.Context(), q)
	}
	if err == nil {
		holds, err = h.admin.ConsumerHolds(r.Context(), cq)
	}
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	rows := make([]heldRow, len(keys))
	for i, k := range keys {
		rows[i] = heldRow{HeldKey: k, Ref: "relay:" + strconv.FormatInt(k.Cause, 10)}
	}
	crows := make([]consumerHoldRow, len(holds))
	for i, k := range holds {
		crows[i] = consumerHoldRow{ConsumerHold: k, Ref: "consumer:" + strconv.FormatInt(k.Cause, 10)}
	}
	data := map[string]any{"Title": "Held keys", "Rows": rows, "Filter": f, "Paged": q.After > 0,
		"Consumers": crows, "ConsumersPaged": cq.After > 0}
	// page is the URL of the page whose lists start after relay and
	// consumer (0: at their first page).
	page := func(relay, consumer int64) string {
		u, _ := url.ParseQuery(f.Query()) // encoded by Query: it parses
		if relay > 0 {
			u.Set("after", strconv.FormatInt(relay, 10))
		}
		if consumer > 0 {
			u.Set("cafter", strconv.FormatInt(consumer, 10))
		}
		return "/held-keys?" + u.Encode()
	}
	data["First"], data["ConsumersFirst"] = page(0, cq.After), page(q.After, 0)
	if len(rows) > h.cfg.PageSize {
		rows = rows[:h.cfg.PageSize]
		data["Rows"], data["Next"] = rows, page(rows[len(rows)-1].Cause, cq.After)
	}
	if len(crows) > h.cfg.PageSize {
		crows = crows[:h.cfg.PageSize]
		data["Consumers"], data["ConsumersNext"] = crows, page(q.After, crows[len(crows)-1].Cause)
	}
	h.render(w, r, "held", data)
}

// parkedHolds adds to the data of parked delivery p's page what it holds
// or waits behind: Behind, the reference of the cause it is held behind;
// or Hold, the key it holds (store.ConsumerHold) with how many deliveries
// wait behind it.
func (h *Handler) parkedHolds(ctx context.Context, p store.Parked, data map[string]any) error {
	if p.Behind != 0 {
		data["Behind"] = "consumer:" + strconv.FormatInt(p.Behind, 10)
		return nil
	}
	if p.Key == "" {
		return nil
	}
	holds, err := h.admin.ConsumerHolds(ctx, store.ListQuery{IDs: []int64{p.ID}, Limit: 1})
	if err != nil {
		return err
	}
	if len(holds) == 1 {
		data["Hold"] = holds[0]
	}
	return nil
}

// markHolds marks the rows of a page of parked deliveries that hold their
// key (store.ConsumerHolds), in one query.
func (h *Handler) markHolds(ctx context.Context, rows []row) error {
	var ids []int64
	for _, r := range rows {
		if r.Key != "" && r.Behind == 0 {
			ids = append(ids, r.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	holds, err := h.admin.ConsumerHolds(ctx, store.ListQuery{IDs: ids, Limit: len(ids)})
	if err != nil {
		return err
	}
	causes := make(map[int64]bool, len(holds))
	for _, k := range holds {
		causes[k.Cause] = true
	}
	for i := range rows {
		rows[i].Holds = causes[rows[i].ID]
	}
	return nil
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
