package dashboard

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/hostcheck"
	"github.com/courier-go/courier/replayguard"
	"github.com/courier-go/courier/store"
)

//go:embed templates/*.html static/*
var assets embed.FS

// SagaHistory reads one saga instance's history. Every store.Sagas[TTx]
// has this method, so a Driver's Sagas() fits.
type SagaHistory interface {
	// History returns the instance's transitions and ignored events,
	// oldest first.
	History(ctx context.Context, sagaType, id string) ([]store.SagaEvent, error)
}

// Config configures a dashboard.
type Config struct {
	// Database is the database shown. Required.
	Database store.Database
	// Sagas, when set, lets the dashboard show one saga's timeline of
	// transitions and ignored events. Optional: a Driver's Sagas() fits.
	Sagas SagaHistory
	// Token, when set, is required by every page and every action: as a
	// session cookie set by the login page, or as
	// "Authorization: Bearer TOKEN". It must be at least MinTokenBytes
	// long (see [CheckToken]). Empty: anybody who reaches the handler may
	// use it, which [CheckBind] allows on loopback addresses only.
	Token string
	// SessionTTL is how long a login lasts; logging out ends it sooner.
	// Default DefaultSessionTTL (12 hours).
	SessionTTL time.Duration
	// Clock is the time sessions end by. Default: the real clock.
	Clock courier.Clock
	// Prefix is the path the handler is mounted under, such as
	// "/courier" (no trailing slash); its links and cookies carry it.
	// Default "" (the root).
	Prefix string
	// PageSize is how many rows a page of a list shows (dead letters,
	// parked messages, failure groups, scheduled messages, overdue sagas,
	// stale keys, tenants); the next page is a link away. Default 50, at
	// most 999 (store.MaxListLimit - 1).
	PageSize int
	// Limit is how many dead letters or parked messages a replay or
	// discard of all that match a filter selects at most, and how many
	// ids one replay, discard or cancel request may name (more are
	// refused with 400 before any is acted on). Default and at most
	// MaxActionIDs (1,000).
	Limit int
	// AllowedHosts are the host names, besides localhost, loopback
	// addresses and the address a request came to, that a request's Host
	// header may name: the names a proxy in front of the dashboard
	// forwards, such as "courier.example.com" (a port is ignored). Any
	// other name is refused with 421 Misdirected Request, since it may be
	// one a hostile web page made resolve to the dashboard's address (DNS
	// rebinding). Default none.
	AllowedHosts []string
	// Logger receives a record of every replay and discard, and of a
	// reading for the trend charts that failed. Default: slog's default
	// logger.
	Logger *slog.Logger
	// SampleEvery is how often [Handler.Run] reads the store's status for
	// the overview's trend charts, and how far apart the readings they
	// keep are: a reading closer than half of it to the one before
	// replaces that one. Default DefaultSampleEvery (10 seconds).
	SampleEvery time.Duration
	// InboxRetention is the consumers' inbox marker retention
	// (inbox.ConsumerConfig.Retention): a parked message parked longer
	// ago is replayed only when the operator ticks "replay anyway" (its
	// marker may be gone, so it may be applied twice). Default
	// inbox.DefaultRetention (7 days); negative: markers are never
	// deleted, and no replay is refused.
	InboxRetention time.Duration
	// History is how far back the trend charts reach: older readings are
	// dropped, and at most History/SampleEvery readings are kept, no more
	// than MaxReadings. Default DefaultHistory (1 hour); at least twice
	// SampleEvery.
	History time.Duration
}

// MaxActionIDs is the most ids one replay, discard or cancel request may
// name, and the most [Config.Limit] may be: each id is a statement of its
// own (a replay a transaction), so that a request of bounded size does a
// bounded amount of work. It is store.MaxListLimit, the most ids a list
// reads at once, so that a confirmation lists in one query every id its
// form posts.
const MaxActionIDs = store.MaxListLimit

// Defaults of [Config.SampleEvery] and [Config.History], and the most
// readings the trend charts may keep (History/SampleEvery).
const (
	DefaultSampleEvery = 10 * time.Second
	DefaultHistory     = time.Hour
	MaxReadings        = 2000
)

func (c *Config) setDefaults() {
	if c.Limit == 0 {
		c.Limit = MaxActionIDs
	}
	if c.PageSize == 0 {
		c.PageSize = 50
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = DefaultSessionTTL
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.SampleEvery == 0 {
		c.SampleEvery = DefaultSampleEvery
	}
	if c.History == 0 {
		c.History = DefaultHistory
	}
	if c.InboxRetention == 0 {
		c.InboxRetention = replayguard.DefaultRetention
	}
	c.Prefix = strings.TrimSuffix(c.Prefix, "/")
}

func (c *Config) validate() error {
	if c.Database == nil {
		return errors.New("dashboard: Config.Database is nil: pass the store.Database to show")
	}
	return c.validateShared()
}

// Validate reports whether New would accept c: nil, or an error naming the
// field and the fix. Zero fields take their defaults first, as in New.
func (c Config) Validate() error {
	c.setDefaults()
	return c.validate()
}

// validateShared checks what every dashboard takes alike, whether it
// shows one database or many tenants'.
func (c *Config) validateShared() error {
	switch {
	case c.Limit < 1 || c.Limit > MaxActionIDs:
		return fmt.Errorf("dashboard: Config.Limit is %d: use 1 to %d (0 means %d)", c.Limit, MaxActionIDs, MaxActionIDs)
	case c.PageSize < 1 || c.PageSize >= store.MaxListLimit:
		return fmt.Errorf("dashboard: Config.PageSize is %d: use 1 to %d (0 means 50)", c.PageSize, store.MaxListLimit-1)
	case c.Prefix != "" && !strings.HasPrefix(c.Prefix, "/"):
		return fmt.Errorf("dashboard: Config.Prefix %q must start with /, such as /courier", c.Prefix)
	case c.SessionTTL < 0:
		return fmt.Errorf("dashboard: Config.SessionTTL is %s: use a positive duration (0 means %s)", c.SessionTTL, DefaultSessionTTL)
	case c.SampleEvery < 0:
		return fmt.Errorf("dashboard: Config.SampleEvery is %s: use a positive duration (0 means %s)", c.SampleEvery, DefaultSampleEvery)
	case c.History < 2*c.SampleEvery:
		return fmt.Errorf("dashboard: Config.History is %s, less than twice Config.SampleEvery (%s): use %s or more (0 means %s)", c.History, c.SampleEvery, 2*c.SampleEvery, DefaultHistory)
	case c.History/c.SampleEvery > MaxReadings:
		return fmt.Errorf("dashboard: Config.History (%s) holds %d readings of Config.SampleEvery (%s), more than %d: sample less often (%s or more) or keep a shorter History",
			c.History, c.History/c.SampleEvery, c.SampleEvery, MaxReadings, (c.History+MaxReadings-1)/MaxReadings)
	}
	if err := CheckHosts(c.AllowedHosts, "dashboard: Config.AllowedHosts"); err != nil {
		return err
	}
	return CheckToken(c.Token, "dashboard: Config.Token")
}

// Handler serves the dashboard. Build it with [New], and run [Handler.Run]
// beside it for the overview's trend charts to read the store on their
// own.
type Handler struct {
	cfg   Config
	admin store.Admin
	ops   store.Operations
	key   []byte // signs CSRF tokens
	hosts hostcheck.Hosts
	sess  *sessions
	// logins bounds the failed token attempts of each client.
	logins *logins
	pages  map[string]*template.Template
	serve  http.Handler
	// root is the path the login, the style sheet and the cookies are
	// under: Config.Prefix, or on a tenant's pages the dashboard's own
	// (theirs is root/t/NAME). tenant names the tenant shown ("" on a
	// dashboard of one database, and on the tenant list); multi is true
	// on a dashboard of tenants.
	root   string
	tenant string
	multi  bool

	trend   *ring       // the readings the overview's trend charts draw
	running atomic.Bool // Run is running

	mu      sync.Mutex
	replays map[string]groupReplay // the failure groups replayed here, by group
}

// New returns the dashboard for cfg. It fails when cfg is invalid.
func New(cfg Config) (*Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	h, err := newHandler(cfg, false)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	h.sharedRoutes(mux)
	h.pageRoutes(mux)
	h.serve = h.guard(mux)
	return h, nil
}

// newHandler returns the handler of cfg (checked and defaulted) with its
// key, sessions and templates, and without its routes. multi says it is
// the tenant list of a dashboard of tenants.
func newHandler(cfg Config, multi bool) (*Handler, error) {
	hs, err := hostcheck.New(cfg.AllowedHosts, "dashboard: Config.AllowedHosts")
	if err != nil {
		return nil, err
	}
	h := &Handler{cfg: cfg, key: make([]byte, 32), hosts: hs, sess: newSessions(cfg.SessionTTL, cfg.Clock), logins: newLogins(cfg.Clock), root: cfg.Prefix, multi: multi,
		trend: newRing(cfg.SampleEvery, cfg.History)}
	if cfg.Database != nil {
		h.admin, h.ops = cfg.Database.Admin(), cfg.Database.Operations()
	}
	if _, err := rand.Read(h.key); err != nil {
		return nil, fmt.Errorf("dashboard: random key: %w", err)
	}
	if err := h.parse(); err != nil {
		return nil, err
	}
	return h, nil
}

// guard returns next behind the checks every request passes, in order:
// its Host header, its origin, the token and the CSRF token (see secure);
// next sees paths without Config.Prefix.
func (h *Handler) guard(next http.Handler) http.Handler {
	next = h.secure(next)
	if h.cfg.Prefix != "" {
		next = http.StripPrefix(h.cfg.Prefix, next)
	}
	// Browsers say where a request comes from (Sec-Fetch-Site, Origin);
	// CrossOriginProtection refuses unsafe requests from other origins, and
	// the CSRF token in every form (checkCSRF) covers browsers that say
	// nothing.
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, http.StatusForbidden, "This request came from another site (a cross-origin form post) and was refused. Use the dashboard's own pages.")
	}))
	// The Host header is checked before anything else: a request for
	// another host gets nothing, not even the style sheet.
	return h.checkHost(cop.Handler(next))
}

// ServeHTTP serves the dashboard's pages and actions.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.serve.ServeHTTP(w, r) }

// CheckBind returns an error unless serving on addr with token is safe: an
// address other than a loopback one (127.0.0.1, ::1, localhost) needs a
// token, or anybody on the network could replay and discard dead letters.
// flag names the token's option in the error, such as "--token".
func CheckBind(addr, token, flag string) error {
	if token != "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q: %v: use host:port, such as 127.0.0.1:8080", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("the dashboard would listen on %s, which is not a loopback address, without a token: anybody who reaches it could replay and discard dead letters; pass %s (a long random secret) or listen on 127.0.0.1", addr, flag)
}

const (
	sessionCookie = "courier_session"
	csrfCookie    = "courier_csrf"
	csrfField     = "csrf"
)

// sign returns the MAC of what under the handler's key, for cookies and
// form tokens.
func (h *Handler) sign(what ...string) string {
	m := hmac.New(sha256.New, h.key)
	for _, s := range what {
		m.Write([]byte(s))
		m.Write([]byte{0})
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (h *Handler) cookiePath() string {
	if h.cfg.Prefix == "" {
		return "/"
	}
	return h.cfg.Prefix + "/"
}

// secure checks the token (when one is set) before anything else, then
// reads the form of an unsafe request (capped) and checks its origin and
// CSRF token; it hands out the CSRF cookie.
func (h *Handler) secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; form-action 'self'")
		w.Header().Set("Referrer-Policy", "same-origin")
		if r.URL.Path == "/static/style.css" {
			next.ServeHTTP(w, r)
			return
		}
		unsafe := r.Method != http.MethodGet && r.Method != http.MethodHead
		if unsafe {
			r.Body = http.MaxBytesReader(w, r.Body, MaxFormBytes)
		}
		csrf := h.csrfToken(w, r)
		r = r.WithContext(context.WithValue(r.Context(), csrfKey{}, csrf))
		// Credentials first: a request without them gets nothing read of
		// its body.
		if h.cfg.Token != "" && r.Header.Get("Authorization") != "" {
			// A bearer token is an attempt, as a login is: refused, right or
			// wrong, while its client must wait, so that the answer tells a
			// guesser nothing; a wrong one counts.
			if h.refuseGuess(w, r) {
				return
			}
			if !h.bearer(r) {
				h.logins.failed(r)
			}
		}
		if h.cfg.Token != "" && r.URL.Path != "/login" && !h.authorized(r) {
			if r.Method == http.MethodGet && r.Header.Get("Authorization") == "" {
				http.Redirect(w, r, h.cfg.Prefix+"/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="courier"`)
			h.fail(w, r, http.StatusUnauthorized, "This dashboard needs its token: log in, or send Authorization: Bearer TOKEN.")
			return
		}
		if unsafe {
			if !h.readForm(w, r) {
				return
			}
			if crossSiteReferer(r) {
				h.fail(w, r, http.StatusForbidden, "This request came from another site (its Referer) and was refused. Use the dashboard's own pages.")
				return
			}
			if !h.checkCSRF(r) {
				h.fail(w, r, http.StatusForbidden, "The form's CSRF token is missing or stale, so nothing was done. Reload the page and try again.")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// MaxFormBytes is the most an unsafe request's body may hold: a form of
// tens of thousands of dead-letter ids. A larger one is refused (413).
const MaxFormBytes = 1 << 20

// readForm reads an unsafe request's body, which must be a URL-encoded
// form (the dashboard's forms are; a multipart body could spill its parts
// into temporary files) of at most MaxFormBytes, or empty. It answers the
// request and returns false when the body is refused.
func (h *Handler) readForm(w http.ResponseWriter, r *http.Request) bool {
	ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if r.ContentLength != 0 && (err != nil || ct != "application/x-www-form-urlencoded") {
		h.fail(w, r, http.StatusUnsupportedMediaType, "The dashboard takes forms URL-encoded (Content-Type: application/x-www-form-urlencoded), and nothing else.")
		return false
	}
	if err := r.ParseForm(); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			h.fail(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("The form is larger than %d KiB, so nothing was done: select fewer dead letters at once.", MaxFormBytes>>10))
			return false
		}
		h.fail(w, r, http.StatusBadRequest, "The form could not be read: "+err.Error())
		return false
	}
	return true
}

type csrfKey struct{}

// csrfToken returns the form token of the request's browser, setting its
// CSRF cookie first when it has none.
func (h *Handler) csrfToken(w http.ResponseWriter, r *http.Request) string {
	c, err := r.Cookie(csrfCookie)
	if err != nil || len(c.Value) < 16 {
		c = &http.Cookie{Name: csrfCookie, Value: rand.Text(), Path: h.cookiePath(), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil}
		http.SetCookie(w, c)
		r.AddCookie(c)
	}
	return h.sign("csrf", c.Value)
}

// checkCSRF reports whether an unsafe request carries the form token of
// its browser's CSRF cookie. A request with the bearer token needs none: a
// browser never sends that header on its own.
func (h *Handler) checkCSRF(r *http.Request) bool {
	if h.cfg.Token != "" && h.bearer(r) {
		return true
	}
	c, err := r.Cookie(csrfCookie)
	if err != nil {
		return false
	}
	got := r.PostFormValue(csrfField)
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(h.sign("csrf", c.Value))) == 1
}

func (h *Handler) bearer(r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(h.cfg.Token)) == 1
}

// authorized reports whether r carries the token or the cookie of a
// session that has not ended.
func (h *Handler) authorized(r *http.Request) bool {
	if h.bearer(r) {
		return true
	}
	c, err := r.Cookie(sessionCookie)
	return err == nil && h.sess.valid(c.Value)
}

func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	next := localPath(r.FormValue("next"))
	if r.Method == http.MethodGet {
		h.render(w, r, "login", map[string]any{"Title": "Log in", "Next": next})
		return
	}
	if h.cfg.Token == "" {
		http.Redirect(w, r, h.cfg.Prefix+"/", http.StatusSeeOther)
		return
	}
	if h.refuseGuess(w, r) {
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.PostFormValue("token")), []byte(h.cfg.Token)) != 1 {
		h.logins.failed(r)
		h.cfg.Logger.Warn("dashboard: login with a wrong token", "remote", r.RemoteAddr)
		w.WriteHeader(http.StatusUnauthorized)
		h.render(w, r, "login", map[string]any{"Title": "Log in", "Next": next, "Error": "That is not the token. The dashboard was started with it (--token)."})
		return
	}
	h.cfg.Logger.Info("dashboard: logged in", "remote", r.RemoteAddr)
	http.SetCookie(w, h.sessionCookie(r, h.sess.start(), int(h.cfg.SessionTTL.Seconds())))
	http.Redirect(w, r, h.cfg.Prefix+next, http.StatusSeeOther)
}

// sessionCookie is the session cookie holding id, for maxAge seconds (-1:
// deleted).
func (h *Handler) sessionCookie(r *http.Request, id string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: sessionCookie, Value: id, Path: h.cookiePath(), HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: maxAge}
}

// logout ends the browser's session on the server, or with all=1 every
// session, and deletes the cookie.
func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	if r.PostFormValue("all") == "1" {
		h.sess.endAll()
		h.cfg.Logger.Info("dashboard: logged out every session", "remote", r.RemoteAddr)
	} else if c, err := r.Cookie(sessionCookie); err == nil {
		h.sess.end(c.Value)
		h.cfg.Logger.Info("dashboard: logged out", "remote", r.RemoteAddr)
	}
	http.SetCookie(w, h.sessionCookie(r, "", -1))
	http.Redirect(w, r, h.cfg.Prefix+"/login", http.StatusSeeOther)
}

// parse reads the templates: each page is the layout with the page's
// content block.
func (h *Handler) parse() error {
	funcs := template.FuncMap{
		"path":  func(p string) string { return h.cfg.Prefix + p },
		"seg":   segment,
		"root":  func(p string) string { return h.root + p },
		"ago":   ago,
		"when":  when,
		"clip":  clip,
		"add1":  func(i int) int { return i + 1 },
		"bytes": sizeOf,
	}
	layout, err := template.New("layout.html").Funcs(funcs).ParseFS(assets, "templates/layout.html")
	if err != nil {
		return fmt.Errorf("dashboard: templates: %w", err)
	}
	names, err := fs.Glob(assets, "templates/*.html")
	if err != nil {
		return err
	}
	h.pages = map[string]*template.Template{}
	for _, n := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.Must(layout.Clone()).ParseFS(assets, n)
		if err != nil {
			return fmt.Errorf("dashboard: template %s: %w", n, err)
		}
		h.pages[name] = t
	}
	return nil
}

// render writes page with data, a map the layout reads Title, Flash and
// the CSRF token from.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, page string, data map[string]any) {
	data["CSRF"], _ = r.Context().Value(csrfKey{}).(string)
	data["Page"] = page
	if data["Side"] == nil {
		data["Side"] = ""
	}
	data["LoggedIn"] = h.cfg.Token != "" && h.authorized(r)
	data["Multi"], data["Tenant"] = h.multi, h.tenant
	if data["Flash"] == nil {
		data["Flash"] = flashText(r.URL.Query())
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	// Rendered whole before it is sent: a page that fails halfway is an
	// error, never a page cut short under 200 OK.
	var b bytes.Buffer
	if err := h.pages[page].ExecuteTemplate(&b, "layout.html", data); err != nil {
		h.cfg.Logger.Error("dashboard: render", "page", page, "err", err)
		if page != "error" {
			h.fail(w, r, http.StatusInternalServerError, "The page could not be drawn; the dashboard's log says why.")
			return
		}
		http.Error(w, "The page could not be drawn; the dashboard's log says why.", http.StatusInternalServerError)
		return
	}
	_, _ = w.Write(b.Bytes())
}

// fail writes an error page with status.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	w.WriteHeader(status)
	if r.Context().Value(csrfKey{}) == nil {
		r = r.WithContext(context.WithValue(r.Context(), csrfKey{}, ""))
	}
	h.render(w, r, "error", map[string]any{"Title": http.StatusText(status), "Status": status, "Message": msg})
}

// failErr writes the error page for err from the store.
func (h *Handler) failErr(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, store.ErrNotFound) {
		h.fail(w, r, http.StatusNotFound, "It does not exist (any more): it may have been replayed or discarded meanwhile.")
		return
	}
	h.cfg.Logger.Error("dashboard: store", "path", r.URL.Path, "err", err)
	h.fail(w, r, http.StatusInternalServerError, "The database answered with an error: "+err.Error())
}
