package dashboard

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
)

// tenantReadTimeout bounds reading one tenant's counts for the tenant
// list, its database's opening included: a tenant that does not answer
// shows the timeout, and holds the page up no longer.
const tenantReadTimeout = 10 * time.Second

// tenantRow is one tenant as the tenant list shows it: its counts, or
// why they could not be read.
type tenantRow struct {
	Name    string
	Link    string // its overview, under the dashboard's prefix
	Pending int64
	Oldest  time.Duration // how long its oldest pending message waits
	Dead    int64         // relay-side dead letters
	Parked  int64         // consumer-side dead letters
	Error   string
}

// list shows the tenants whose names hold the parameter name (any case),
// a page of PageSize at a time after the name of the parameter after,
// each with its counts, read Reads at a time.
func (t *Tenants) list(w http.ResponseWriter, r *http.Request) {
	all, err := t.names(r.Context())
	if err != nil {
		t.failList(w, r, err)
		return
	}
	q := r.URL.Query()
	find, after := strings.TrimSpace(q.Get("name")), q.Get("after")
	var page []string
	total := 0
	for _, n := range all {
		if find != "" && !strings.Contains(strings.ToLower(n), strings.ToLower(find)) {
			continue
		}
		total++
		if n > after && len(page) <= t.cfg.PageSize {
			page = append(page, n)
		}
	}
	data := map[string]any{"Title": "Tenants", "Find": find, "Total": total, "All": len(all), "Paged": after != "", "Reads": t.cfg.Reads}
	if len(page) > t.cfg.PageSize {
		page = page[:t.cfg.PageSize]
		next := url.Values{"after": {page[len(page)-1]}}
		if find != "" {
			next.Set("name", find)
		}
		data["Next"] = "/?" + next.Encode()
	}
	data["Rows"] = t.read(r.Context(), page)
	t.top.render(w, r, "tenants", data)
}

// read reads the counts of the tenants named, Reads at a time.
func (t *Tenants) read(ctx context.Context, names []string) []tenantRow {
	rows := make([]tenantRow, len(names))
	var g errgroup.Group
	g.SetLimit(t.cfg.Reads)
	for i, name := range names {
		rows[i] = tenantRow{Name: name, Link: tenantLink(name)}
		g.Go(func() error {
			if err := t.readOne(ctx, &rows[i]); err != nil {
				rows[i].Error = strings.Join(strings.Fields(err.Error()), " ")
			}
			return nil
		})
	}
	_ = g.Wait()
	return rows
}

// readOne reads one tenant's counts into row.
func (t *Tenants) readOne(ctx context.Context, row *tenantRow) error {
	ctx, cancel := context.WithTimeout(ctx, tenantReadTimeout)
	defer cancel()
	h, err := t.acquireDB(ctx, row.Name, true)
	if err != nil {
		return err
	}
	defer h.Release()
	st, err := h.Value().db.Database.Operations().Status(ctx)
	if err != nil {
		return err
	}
	row.Pending, row.Oldest, row.Dead = st.Outbox.Pending, st.Outbox.OldestPendingAge(), st.Outbox.DeadLetters
	for _, c := range st.Consumers {
		row.Parked += c.Parked
	}
	return nil
}
