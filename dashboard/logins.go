package dashboard

import (
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	xrate "golang.org/x/time/rate"

	"github.com/courier-go/courier"
)

// The bound on guessing the token: a client address may fail LoginBurst
// times at once (a login with a wrong token, or a request with a wrong
// bearer token), then once per LoginEvery. Past it, its attempts are
// answered 429 Too Many Requests with Retry-After, the right token
// included, until it may try again.
const (
	LoginBurst = 5
	LoginEvery = 12 * time.Second
)

// maxClients bounds the client addresses whose failures are kept: past
// it, those that may try at full burst again are forgotten first, then
// any.
const maxClients = 10_000

// logins counts the failed attempts of each client address, as a token
// bucket per address (golang.org/x/time/rate) on the dashboard's clock.
type logins struct {
	now courier.Clock

	mu sync.Mutex
	by map[string]*xrate.Limiter
}

func newLogins(now courier.Clock) *logins {
	return &logins{now: now, by: map[string]*xrate.Limiter{}}
}

// client is the address a request came from, without its port.
func client(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// wait returns how long the client of r must wait before it may try a
// token again: 0 when it may now.
func (l *logins) wait(r *http.Request) time.Duration {
	now := l.now.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	lim := l.by[client(r)]
	if lim == nil || lim.TokensAt(now) >= 1 {
		return 0
	}
	res := lim.ReserveN(now, 1)
	defer res.CancelAt(now)
	return res.DelayFrom(now)
}

// failed counts a failed attempt of the client of r.
func (l *logins) failed(r *http.Request) {
	now := l.now.Now()
	addr := client(r)
	l.mu.Lock()
	defer l.mu.Unlock()
	lim := l.by[addr]
	if lim == nil {
		if len(l.by) >= maxClients {
			l.forget(now)
		}
		lim = xrate.NewLimiter(xrate.Every(LoginEvery), LoginBurst)
		l.by[addr] = lim
	}
	lim.AllowN(now, 1)
}

// forget drops the clients that may try at full burst again, or, when
// none may, one of them.
func (l *logins) forget(now time.Time) {
	for addr, lim := range l.by {
		if lim.TokensAt(now) >= LoginBurst {
			delete(l.by, addr)
		}
	}
	for addr := range l.by {
		if len(l.by) < maxClients {
			return
		}
		delete(l.by, addr)
	}
}

// refuseGuess answers 429 with Retry-After when the client of r must wait
// before it tries a token again, and reports whether it did.
func (h *Handler) refuseGuess(w http.ResponseWriter, r *http.Request) bool {
	d := h.logins.wait(r)
	if d <= 0 {
		return false
	}
	secs := int((d + time.Second - 1) / time.Second)
	h.cfg.Logger.Warn("dashboard: refused a token attempt after too many failures", "remote", r.RemoteAddr, "retry_after_s", secs)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	h.fail(w, r, http.StatusTooManyRequests, "Too many attempts with a wrong token came from your address: try again in "+strconv.Itoa(secs)+
		" seconds. The dashboard was started with its token (--token).")
	return true
}
