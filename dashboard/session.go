package dashboard

import (
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/courier-go/courier"
)

// MinTokenBytes is the shortest token the dashboard takes: a token is all
// that stands between the network and replaying or discarding every dead
// letter, and the login page can be tried again and again.
const MinTokenBytes = 16

// CheckToken returns an error unless token is empty (no token: see
// [CheckBind]) or a secret the dashboard takes: at least MinTokenBytes
// bytes, without spaces or control characters (which an Authorization
// header cannot carry, and which are most likely the end of a line read
// from a file). flag names the option in the error, such as "--token".
func CheckToken(token, flag string) error {
	const fix = "use a random secret of at least 16 bytes, such as the output of openssl rand -hex 32"
	switch {
	case token == "":
		return nil
	case strings.ContainsFunc(token, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		return fmt.Errorf("%s holds a space, a line break or a control character: %s", flag, fix)
	case len(token) < MinTokenBytes:
		return fmt.Errorf("%s is %d bytes long, too short to resist guessing: %s", flag, len(token), fix)
	}
	return nil
}

// DefaultSessionTTL is how long a login lasts by default.
const DefaultSessionTTL = 12 * time.Hour

// maxSessions bounds the sessions kept: beyond it a login ends the session
// closest to its end.
const maxSessions = 10_000

// sessions are the logins of a dashboard, kept in memory: a session cookie
// holds a random id, and only its digest is kept. A session ends when it
// expires, when its browser logs out, when any browser logs out of every
// session, and when the process stops (so a new token, which needs a
// restart or a new Handler, ends them all).
type sessions struct {
	ttl time.Duration
	now courier.Clock

	mu   sync.Mutex
	ends map[[sha256.Size]byte]time.Time // by the id's digest
}

func newSessions(ttl time.Duration, now courier.Clock) *sessions {
	return &sessions{ttl: ttl, now: now, ends: map[[sha256.Size]byte]time.Time{}}
}

// start begins a session and returns its id, for the cookie.
func (s *sessions) start() string {
	id := rand.Text()
	now := s.now.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, end := range s.ends {
		if !end.After(now) {
			delete(s.ends, k)
		}
	}
	if len(s.ends) >= maxSessions {
		var first [sha256.Size]byte
		var firstEnd time.Time
		for k, end := range s.ends {
			if firstEnd.IsZero() || end.Before(firstEnd) {
				first, firstEnd = k, end
			}
		}
		delete(s.ends, first)
	}
	s.ends[sha256.Sum256([]byte(id))] = now.Add(s.ttl)
	return id
}

// valid reports whether id is a session that has not ended.
func (s *sessions) valid(id string) bool {
	if id == "" {
		return false
	}
	k := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	end, ok := s.ends[k]
	if ok && !end.After(s.now.Now()) {
		delete(s.ends, k)
		return false
	}
	return ok
}

// end ends session id.
func (s *sessions) end(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.ends, sha256.Sum256([]byte(id)))
}

// endAll ends every session.
func (s *sessions) endAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.ends)
}
