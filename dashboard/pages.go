package dashboard

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/courier-go/courier/failgroup"
	"github.com/courier-go/courier/store"
)

// sharedRoutes are the routes a dashboard of tenants serves once for all
// of them: the style sheet, the login and the logout.
func (h *Handler) sharedRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /static/", h.static)
	mux.HandleFunc("GET /login", h.login)
	mux.HandleFunc("POST /login", h.login)
	mux.HandleFunc("POST /logout", h.logout)
}

// staticFiles are the files under /static/: the embedded static
// directory, and nothing else of the embedded files (the templates'
// sources are not for serving).
var staticFiles = func() fs.FS {
	sub, err := fs.Sub(assets, "static")
	if err != nil {
		panic(err) // "static" is a valid name: fs.Sub cannot fail
	}
	return sub
}()

// static serves a file of staticFiles. A path that does not name one of
// them, however it is spelled (a ".." or an encoded "/" stepping out of
// the directory, the directory itself), is answered 404 without looking
// further.
func (h *Handler) static(w http.ResponseWriter, r *http.Request) {
	name, _ := strings.CutPrefix(r.URL.Path, "/static/")
	if !fs.ValidPath(name) || strings.Contains(r.URL.Path, "..") {
		h.fail(w, r, http.StatusNotFound, "There is no such file.")
		return
	}
	if fi, err := fs.Stat(staticFiles, name); err != nil || !fi.Mode().IsRegular() {
		h.fail(w, r, http.StatusNotFound, "There is no such file.")
		return
	}
	http.ServeFileFS(w, r, staticFiles, name)
}

// pageRoutes are the pages and actions of one database.
func (h *Handler) pageRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /{$}", h.overview)
	for _, s := range []side{relaySide, consumerSide} {
		mux.HandleFunc("GET /"+s.path, func(w http.ResponseWriter, r *http.Request) { h.letters(w, r, s) })
		mux.HandleFunc("GET /"+s.path+"/{id}", func(w http.ResponseWriter, r *http.Request) { h.letter(w, r, s) })
		mux.HandleFunc("GET /"+s.path+"/confirm", func(w http.ResponseWriter, r *http.Request) { h.confirm(w, r, s) })
		mux.HandleFunc("POST /"+s.path+"/{action}", func(w http.ResponseWriter, r *http.Request) { h.act(w, r, s) })
	}
	h.failureRoutes(mux)
	h.heldRoutes(mux)
	h.runRoutes(mux)
	h.deliveryRoutes(mux)
	mux.HandleFunc("GET /consumers", h.consumers)
	mux.HandleFunc("GET /sagas", h.sagas)
	mux.HandleFunc("GET /sagas/{type}/{id}", h.saga)
	mux.HandleFunc("GET /keys", h.keys)
	mux.HandleFunc("GET /scheduled", h.scheduled)
	mux.HandleFunc("GET /scheduled/confirm", h.confirmCancel)
	mux.HandleFunc("POST /scheduled/cancel", h.cancelScheduled)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, http.StatusNotFound, "There is no such page.")
	})
}

func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	st, err := h.ops.Status(r.Context())
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	var expired int64
	for _, l := range st.Relays {
		expired += l.Expired
	}
	now := readingOf(st)
	h.trend.add(now)
	out := st.Outbox
	data := map[string]any{"Title": "Overview", "Now": st.Now, "Stats": out, "OldestAge": out.OldestPendingAge(),
		"Parked": now.parked, "Dialect": h.cfg.Database.Dialect(), "Topics": st.Topics, "Relays": st.Relays, "Expired": expired,
		"Published": st.Published, "Scheduled": st.Scheduled, "HoldAge": out.OldestHoldAge(), "ConsumerHolds": consumerHoldsOf(st)}
	tr := h.trendsOf(h.trend.readings(), r.URL.Query().Get("refresh") == "1")
	tr.Charts = append(tr.Charts, h.latencyCharts(r.Context(), st.Now)...)
	data["Trends"] = tr
	if tr.Refreshing {
		data["Refresh"] = tr.Refresh
	}
	h.render(w, r, "overview", data)
}

// side is one kind of dead letter: relay-side (the broker kept rejecting
// it) or consumer-side (a consumer parked it).
type side struct {
	path  string // URL path segment
	title string
	ref   string // prefix of its references, as the CLI names them
}

var (
	relaySide    = side{path: "dead-letters", title: "Dead letters", ref: "relay"}
	consumerSide = side{path: "parked", title: "Parked messages", ref: "consumer"}
)

// row is a dead letter of either side as a list shows it.
type row struct {
	ID       int64
	Ref      string
	When     time.Time
	Source   string // topic, or consumer ← subject
	Type     string
	Message  string
	Attempts int
	Error    string
	Size     int64      // the payload's, in bytes
	Replay   *time.Time // consumer side: when a replay was asked
	Consumer string     // consumer side: the consumer that parked it
	Group    string     // the id of its failure group (failgroup.Cause.ID)
	Holds    bool       // it holds its key (relay: store.Failure.Hold; consumer: store.ConsumerHold)
	Key      string     // consumer side: the key it holds or waits for, if any
	Behind   int64      // consumer side: the parked delivery that holds its key, which it waits behind
}

func relayRow(d store.DeadLetterSummary) row {
	return row{ID: d.ID, Ref: "relay:" + strconv.FormatInt(d.ID, 10), When: d.DeadAt, Source: d.Topic,
		Type: d.Type, Message: d.MessageID, Attempts: d.Attempts, Error: d.LastError, Size: d.PayloadSize,
		Group: failgroup.OfDeadLetter(d.LastError).ID(), Holds: d.Holds}
}

func parkedRow(p store.ParkedSummary) row {
	return row{ID: p.ID, Ref: "consumer:" + strconv.FormatInt(p.ID, 10), When: p.ParkedAt, Source: p.Consumer + " ← " + p.Subject,
		Type: p.Type, Message: p.MessageID, Attempts: p.Attempts, Error: p.Reason + ": " + p.Error,
		Size: p.PayloadSize, Replay: p.ReplayRequested, Consumer: p.Consumer, Group: failgroup.OfParked(p.Consumer, p.Reason, p.Error).ID(),
		Key: p.Key, Behind: p.Behind}
}

// filter selects dead letters, as the CLI's courier dlq --topic, --consumer
// and --error do; the store matches it (store.ListQuery).
type filter struct {
	Topic, Consumer, Error string
}

// filterOf reads a filter from the parameters of a list, a confirmation
// or an action.
func filterOf(q url.Values) filter {
	return filter{Topic: strings.TrimSpace(q.Get("topic")), Consumer: strings.TrimSpace(q.Get("consumer")), Error: strings.TrimSpace(q.Get("error"))}
}

// Query is the filter as URL parameters.
func (f filter) Query() string {
	q := url.Values{}
	for k, v := range map[string]string{"topic": f.Topic, "consumer": f.Consumer, "error": f.Error} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q.Encode()
}

// Any reports whether the filter selects anything less than all.
func (f filter) Any() bool { return f.Topic != "" || f.Consumer != "" || f.Error != "" }

// list reads the summaries of a side's dead letters that q selects.
func (h *Handler) list(r *http.Request, s side, q store.ListQuery) ([]row, error) {
	var rows []row
	if s == relaySide {
		dead, err := h.admin.ListDeadLetters(r.Context(), q)
		for _, d := range dead {
			rows = append(rows, relayRow(d))
		}
		return rows, err
	}
	parked, err := h.admin.ListParked(r.Context(), q)
	for _, p := range parked {
		rows = append(rows, parkedRow(p))
	}
	return rows, err
}

// query is the store's query of f.
func (f filter) query() store.ListQuery {
	return store.ListQuery{Topic: f.Topic, Consumer: f.Consumer, Error: f.Error}
}

// matching reads the summaries of every dead letter of a side that f
// selects, up to Config.Limit, a page of the store at a time, and reports
// whether more match.
func (h *Handler) matching(r *http.Request, s side, f filter) ([]row, bool, error) {
	var all []row
	q := f.query()
	for {
		q.Limit = min(store.MaxListLimit, h.cfg.Limit+1-len(all))
		rows, err := h.list(r, s, q)
		if err != nil {
			return nil, false, err
		}
		all = append(all, rows...)
		if len(rows) < q.Limit || len(all) > h.cfg.Limit {
			break
		}
		q.After = rows[len(rows)-1].ID
	}
	if len(all) > h.cfg.Limit {
		return all[:h.cfg.Limit], true, nil
	}
	return all, false, nil
}

// letters lists a page of a side's dead letters: PageSize of them after
// the id of the parameter after, with a link to the next page.
func (h *Handler) letters(w http.ResponseWriter, r *http.Request, s side) {
	params := r.URL.Query()
	f := filterOf(params)
	q := f.query()
	q.After, _ = strconv.ParseInt(params.Get("after"), 10, 64)
	q.Limit = h.cfg.PageSize + 1
	rows, err := h.list(r, s, q)
	if err == nil && s == consumerSide {
		err = h.markHolds(r.Context(), rows)
	}
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	data := map[string]any{"Title": s.title, "Side": s.path, "Relay": s == relaySide, "Rows": rows, "Filter": f,
		"Paged": q.After > 0, "All": []string{"replay", "discard"}}
	if len(rows) > h.cfg.PageSize {
		rows = rows[:h.cfg.PageSize]
		next, _ := url.ParseQuery(f.Query()) // encoded by Query: it parses
		next.Set("after", strconv.FormatInt(rows[len(rows)-1].ID, 10))
		data["Rows"], data["Next"] = rows, "/"+s.path+"?"+next.Encode()
	}
	h.render(w, r, "letters", data)
}

func pathID(r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	return id, err == nil
}

func (h *Handler) letter(w http.ResponseWriter, r *http.Request, s side) {
	id, ok := pathID(r)
	if !ok {
		h.fail(w, r, http.StatusNotFound, "There is no such page.")
		return
	}
	data := map[string]any{"Side": s.path, "Relay": s == relaySide}
	if s == relaySide {
		d, err := h.admin.DeadLetter(r.Context(), id)
		if err != nil {
			h.failErr(w, r, err)
			return
		}
		data["Title"], data["D"], data["ID"] = "Dead letter relay:"+strconv.FormatInt(id, 10), d, id
		data["Payload"] = showPayload(d.Payload)
		data["Headers"] = sortedHeaders(d.Headers, nil)
		if err := h.heldBehind(r.Context(), d, data); err != nil {
			h.failErr(w, r, err)
			return
		}
	} else {
		p, err := h.admin.ParkedMessage(r.Context(), id)
		if err != nil {
			h.failErr(w, r, err)
			return
		}
		data["Title"], data["P"], data["ID"] = "Parked message consumer:"+strconv.FormatInt(id, 10), p, id
		data["Payload"] = showPayload(p.Payload)
		data["Headers"] = sortedHeaders(nil, p.Headers)
		if err := h.parkedHolds(r.Context(), p, data); err != nil {
			h.failErr(w, r, err)
			return
		}
	}
	h.render(w, r, "letter", data)
}

// header is one header line of a message.
type header struct{ Name, Value string }

func sortedHeaders(one map[string]string, many map[string][]string) []header {
	var out []header
	for k, v := range one {
		out = append(out, header{k, v})
	}
	for k, vs := range many {
		out = append(out, header{k, strings.Join(vs, ", ")})
	}
	slices.SortFunc(out, func(a, b header) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// payload is a message body as a page shows it.
type payload struct {
	Size   int
	Text   string
	Base64 bool
}

// showPayload shows a payload as text when it is printable UTF-8, in
// base64 otherwise.
func showPayload(b []byte) payload {
	printable := utf8.Valid(b) && !strings.ContainsFunc(string(b), func(r rune) bool {
		return !unicode.IsPrint(r) && !unicode.IsSpace(r)
	})
	if printable {
		return payload{Size: len(b), Text: string(b)}
	}
	return payload{Size: len(b), Text: base64.StdEncoding.EncodeToString(b), Base64: true}
}

// actions are what the dashboard does to dead letters, and how it says
// it did.
var actions = map[string]struct{ verb, done string }{
	"replay":  {"Replay", "replayed"},
	"discard": {"Discard", "discarded"},
}

// selected returns the rows a confirmation names: the ids given (id=…),
// or with all=1 every row the filter selects (up to Config.Limit, capped
// true when more match); missing lists the ids given that are not there.
func (h *Handler) selected(r *http.Request, s side, q url.Values) (rows []row, missing []string, capped bool, err error) {
	if id := q.Get("group"); id != "" {
		return h.groupMembers(r, s, id)
	}
	if q.Get("all") == "1" {
		rows, capped, err := h.matching(r, s, filterOf(q))
		return rows, nil, capped, err
	}
	var ids []int64
	for _, v := range q["id"] {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			missing = append(missing, v)
			continue
		}
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return nil, missing, false, nil
	}
	if h.tooMany(len(ids)) != "" {
		return nil, nil, false, errTooMany
	}
	rows, err = h.list(r, s, store.ListQuery{IDs: ids, Limit: len(ids)})
	if err != nil {
		return nil, nil, false, err
	}
	found := map[int64]bool{}
	for _, one := range rows {
		found[one.ID] = true
	}
	for _, id := range ids {
		if !found[id] {
			missing = append(missing, s.ref+":"+strconv.FormatInt(id, 10))
		}
	}
	return rows, missing, false, nil
}

// errTooMany is selected's error for more ids than a confirmation lists.
var errTooMany = errors.New("too many ids")

// tooMany says, for the page, why a request that names n ids to act on
// (replay, discard, cancel) names too many: more than Config.Limit (at
// most MaxActionIDs); "" when it does not. Every form that acts on ids
// checks it before it acts on any.
func (h *Handler) tooMany(n int) string {
	if n <= h.cfg.Limit {
		return ""
	}
	return fmt.Sprintf("This request names %d ids: a replay, discard or cancel takes at most %d at once. Select fewer, or select them all with a filter and do it again for the rest.", n, h.cfg.Limit)
}

// confirm shows what an action would do and asks to go ahead. It changes
// nothing: the button it shows posts the action with the ids listed.
func (h *Handler) confirm(w http.ResponseWriter, r *http.Request, s side) {
	q := r.URL.Query()
	a, ok := actions[q.Get("action")]
	if !ok {
		h.fail(w, r, http.StatusBadRequest, "Choose replay or discard.")
		return
	}
	rows, missing, capped, err := h.selected(r, s, q)
	group := q.Get("group")
	if errors.Is(err, errNoGroup) {
		h.fail(w, r, http.StatusNotFound, fmt.Sprintf("There is no failure group %q of %s now: its failures were replayed or discarded, or their cause changed. The failures page lists the groups there are.", group, strings.ToLower(s.title)))
		return
	}
	if errors.Is(err, errTooMany) {
		h.fail(w, r, http.StatusBadRequest, h.tooMany(len(q["id"])))
		return
	}
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	what := "Replay"
	explain := "Each goes back into the outbox, in its original place among its key's messages, with no attempts counted; a relay publishes it again."
	if s == consumerSide {
		explain = "Its consumer applies each again within its replay interval and unparks it when that succeeds."
	}
	if q.Get("action") == "discard" {
		what = "Discard"
		explain = "Each is deleted for good. This cannot be undone."
	}
	explain += heldExplain(rows, q.Get("action"))
	back := "/" + s.path + "?" + filterOf(q).Query()
	title := fmt.Sprintf("%s %d %s?", what, len(rows), strings.ToLower(s.title))
	if group != "" {
		back = "/failures/" + segment(group)
		title = fmt.Sprintf("%s the %d %s of failure group %s?", what, len(rows), strings.ToLower(s.title), group)
	}
	guard := h.replayPreview(s, q.Get("action"), rows)
	h.render(w, r, "confirm", map[string]any{"Title": title, "Group": group, "Guard": guard,
		"Side": s.path, "Action": q.Get("action"), "Verb": a.verb, "Rows": rows, "Missing": missing, "Explain": explain, "Capped": capped, "Limit": h.cfg.Limit,
		"Back": back})
}

// act replays or discards the posted ids, then goes back to the list
// saying what it did.
func (h *Handler) act(w http.ResponseWriter, r *http.Request, s side) {
	name := r.PathValue("action")
	a, ok := actions[name]
	if !ok {
		h.fail(w, r, http.StatusNotFound, "There is no such action: use replay or discard.")
		return
	}
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, http.StatusBadRequest, "The form could not be read: "+err.Error())
		return
	}
	if len(r.PostForm["id"]) == 0 {
		h.fail(w, r, http.StatusBadRequest, "No dead letter was chosen: tick one or more, then confirm.")
		return
	}
	if problem := h.tooMany(len(r.PostForm["id"])); problem != "" {
		h.fail(w, r, http.StatusBadRequest, problem)
		return
	}
	if name == "replay" && h.guardedReplay(w, r, s) {
		return
	}
	done, gone, failed := 0, 0, 0
	var replayed []int64
	for _, v := range r.PostForm["id"] {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			failed++
			h.cfg.Logger.Warn("dashboard: "+name+": not an id", "id", v, "remote", r.RemoteAddr)
			continue
		}
		switch {
		case s == relaySide && name == "replay":
			err = h.admin.ReplayDeadLetter(r.Context(), id)
		case s == relaySide:
			err = h.admin.DiscardDeadLetter(r.Context(), id)
		case name == "replay":
			err = h.admin.RequestReplay(r.Context(), id)
		default:
			err = h.admin.DiscardParked(r.Context(), id)
		}
		ref := s.ref + ":" + v
		switch {
		case err == nil:
			done++
			replayed = append(replayed, id)
			h.cfg.Logger.Info("dashboard: "+a.done, "dead_letter", ref, "remote", r.RemoteAddr)
		case errors.Is(err, store.ErrNotFound):
			gone++
		default:
			failed++
			h.cfg.Logger.Error("dashboard: "+name, "dead_letter", ref, "err", err)
		}
	}
	if name == "replay" {
		h.recordReplay(r, s, done, gone, failed)
	}
	f := flash{code: a.done, done: done, gone: gone, failed: failed}
	list := "/" + s.path
	if group := r.PostFormValue("group"); group != "" {
		list = "/failures"
		if name == "replay" {
			h.replayed(group, s.ref, replayed, h.cfg.Clock.Now())
		}
	}
	h.backTo(w, r, list, f)
}

// backTo redirects to the list page list (a path of the dashboard) that
// the posted form came from, its filters kept, with the banner of f: to
// the form's back when that is a page of list, to list itself otherwise,
// and to nothing else.
func (h *Handler) backTo(w http.ResponseWriter, r *http.Request, list string, f flash) {
	back := localPath(r.PostFormValue("back"))
	if u, err := url.Parse(back); err != nil || u.Path != list {
		back = list
	}
	sep := "?"
	if strings.Contains(back, "?") {
		sep = "&"
	}
	http.Redirect(w, r, h.cfg.Prefix+back+sep+f.query(), http.StatusSeeOther)
}

// consumerHolds is what the consumers hold (inbox.ConsumerConfig.HoldKeys),
// together: the keys, the deliveries parked behind them, and how long the
// oldest hold has lasted.
type consumerHolds struct {
	Keys, Held int64
	OldestAge  time.Duration
}

// consumerHoldsOf sums the consumers' holds of st.
func consumerHoldsOf(st store.Status) consumerHolds {
	var c consumerHolds
	for _, s := range st.Consumers {
		c.Keys += s.HeldKeys
		c.Held += s.Held
		if !s.OldestHold.IsZero() {
			c.OldestAge = max(c.OldestAge, st.Now.Sub(s.OldestHold))
		}
	}
	return c
}

func (h *Handler) consumers(w http.ResponseWriter, r *http.Request) {
	st, err := h.ops.Status(r.Context())
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	h.render(w, r, "consumers", map[string]any{"Title": "Consumers", "Rows": st.Consumers, "Markers": st.InboxMarkers})
}

// reconcileMax is how many overdue sagas or stale keys the sagas and keys
// pages read at most: Reconcile's default Limit, and courier reconcile's
// default --limit. Reconcile takes any Limit, but it has no cursor: each
// list is one query that reads from the oldest row, so page N costs the
// N-1 pages before it too. Pages past the first reconcileMax rows are not
// shown; they say so and name the command that lists the rest.
const reconcileMax = 1000

// reconciledPage is a page of a list Reconcile returns oldest first, as
// the sagas and keys pages show it.
type reconciledPage struct {
	No    int // the page's number, from 1
	Pages int // how many pages there are, when the list was read whole (filtered); 0 otherwise
	// Prev and Next are the links to the pages before and after it, if
	// there are such pages.
	Prev, Next string
	// Beyond, when the list has more than reconcileMax rows, is the
	// deepest page the pages show.
	Beyond int
	Max    int // reconcileMax
}

// pageNo reads the page parameter of q: 1 when it is missing or not a
// positive number. Every paged list reads its page number here and its
// rows with window, whose arithmetic cannot overflow.
func pageNo(q url.Values) int {
	n, err := strconv.Atoi(q.Get("page"))
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// pages is how many pages n rows fill, size a page; 1 when there are none
// (the first page, empty).
func pages(n, size int) int { return max(1, (n+size-1)/size) }

// window returns the bounds of page no (from 1) of n rows, size rows a
// page: [from, to), empty (n, n) for a page past the last. It compares no
// with the number of pages before it multiplies, so that a huge no (one
// whose first row's index an int cannot hold) is a page past the last,
// not a negative index.
func window(no, size, n int) (from, to int) {
	if no < 1 || no > pages(n, size) {
		return n, n
	}
	from = (no - 1) * size
	return from, min(from+size, n)
}

// deepestPage is the number of the last page that shows rows of the first
// reconcileMax.
func (h *Handler) deepestPage() int {
	return (reconcileMax + h.cfg.PageSize - 1) / h.cfg.PageSize
}

// reconcileLimit is the ReconcileOptions.Limit that page no of a list needs:
// the rows of that page and of those before it, and one more to tell
// whether a next page exists, up to reconcileMax+1. With whole, the list is
// read as far as the pages go, to be filtered before it is paged.
func (h *Handler) reconcileLimit(no int, whole bool) int {
	if whole {
		return reconcileMax + 1
	}
	return min(min(no, h.deepestPage())*h.cfg.PageSize, reconcileMax) + 1
}

// pageOf returns the rows of page no of list, a list Reconcile returned
// oldest first with the Limit reconcileLimit gave, and the page's links
// (link makes the link to a page). When drop is not nil, list was read
// whole: the rows drop reports are removed before it is paged.
func pageOf[T any](list []T, drop func(T) bool, no, size int, link func(int) string) ([]T, reconciledPage) {
	p := reconciledPage{No: no, Max: reconcileMax}
	if len(list) > reconcileMax {
		list, p.Beyond = list[:reconcileMax], (reconcileMax+size-1)/size
	}
	if drop != nil {
		list = slices.DeleteFunc(list, drop)
	}
	last := pages(len(list), size) // the last page with rows, when list was read to its end
	if drop != nil {
		p.Pages = last
	}
	if no > 1 {
		p.Prev = link(min(no-1, last))
	}
	if no > last {
		return nil, p
	}
	from, to := window(no, size, len(list))
	if to < len(list) {
		p.Next = link(no + 1)
	}
	return list[from:to], p
}

// pageLink is the link to page no of the list at path, with its filters
// (params, which it does not change).
func pageLink(path string, params url.Values, no int) string {
	q := url.Values{}
	for k, v := range params {
		q[k] = v
	}
	if no > 1 {
		q.Set("page", strconv.Itoa(no))
	}
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

// sagas counts the saga instances by state and lists the overdue ones, a
// page of Config.PageSize at a time, oldest deadline first. A state
// filter applies to the overdue instances after Reconcile reads them: the
// page then reads the first reconcileMax (every page of them), filters
// them and pages what is left.
func (h *Handler) sagas(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if t, id := strings.TrimSpace(q.Get("type")), strings.TrimSpace(q.Get("id")); t != "" && id != "" {
		http.Redirect(w, r, h.cfg.Prefix+"/sagas/"+segment(t)+"/"+segment(id), http.StatusSeeOther)
		return
	}
	st, err := h.ops.Status(r.Context())
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	state := strings.TrimSpace(q.Get("state"))
	no := pageNo(q)
	rec, err := h.ops.Reconcile(r.Context(), store.ReconcileOptions{Limit: h.reconcileLimit(no, state != "")})
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	counts := slices.DeleteFunc(slices.Clone(st.Sagas), func(c store.SagaCount) bool {
		return state != "" && c.State != state && c.Phase != state
	})
	var drop func(store.OverdueSaga) bool
	params := url.Values{}
	if state != "" {
		drop = func(o store.OverdueSaga) bool { return o.State != state && o.Phase != state }
		params.Set("state", state)
	}
	overdue, page := pageOf(rec.OverdueSagas, drop, no, h.cfg.PageSize, func(n int) string { return pageLink("/sagas", params, n) })
	h.render(w, r, "sagas", map[string]any{"Title": "Sagas", "History": h.cfg.Sagas != nil, "Counts": counts,
		"OverdueByType": st.OverdueSagas, "Overdue": overdue, "Paging": page, "State": state, "Now": rec.Now})
}

func (h *Handler) saga(w http.ResponseWriter, r *http.Request) {
	t, ok := h.pathValue(w, r, "type")
	if !ok {
		return
	}
	id, ok := h.pathValue(w, r, "id")
	if !ok {
		return
	}
	if h.cfg.Sagas == nil {
		h.fail(w, r, http.StatusNotFound, "This dashboard was built without a saga store (Config.Sagas), so it cannot show a saga's timeline.")
		return
	}
	events, err := h.cfg.Sagas.History(r.Context(), t, id)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	h.render(w, r, "saga", map[string]any{"Title": "Saga " + t + " " + id, "Type": t, "ID": id, "Events": events})
}

// keys counts the idempotency keys and lists those left in flight past
// their lock, a page of Config.PageSize at a time, oldest lock first.
func (h *Handler) keys(w http.ResponseWriter, r *http.Request) {
	st, err := h.ops.Status(r.Context())
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	no := pageNo(r.URL.Query())
	rec, err := h.ops.Reconcile(r.Context(), store.ReconcileOptions{Limit: h.reconcileLimit(no, false)})
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	stale, page := pageOf(rec.StaleKeys, nil, no, h.cfg.PageSize, func(n int) string { return pageLink("/keys", nil, n) })
	h.render(w, r, "keys", map[string]any{"Title": "Idempotency keys", "Keys": st.Keys, "Stale": stale, "Paging": page, "Now": rec.Now})
}

// ago shows a duration for people: 3s, 4m10s, 2h5m, 3d4h.
func ago(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	default:
		return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
	}
}

// when shows a time in UTC, to the second.
func when(t any) string {
	switch v := t.(type) {
	case time.Time:
		if v.IsZero() {
			return "-"
		}
		return v.UTC().Format("2006-01-02 15:04:05")
	case *time.Time:
		if v == nil {
			return "-"
		}
		return when(*v)
	}
	return "-"
}

// sizeOf shows a size for people: 512 B, 3.4 KiB, 10.0 MiB.
func sizeOf(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/unit, 0
	for v >= unit && i < 3 {
		v, i = v/unit, i+1
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGT"[i])
}

// clip shortens s to n runes on one line.
func clip(n int, s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
