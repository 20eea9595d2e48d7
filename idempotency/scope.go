package idempotency

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
)

// ErrNoPrincipal is what a Config.Scope function returns (wrapped) for a
// request that names no principal, such as one without credentials; the
// middleware answers it 401 and stores nothing. ScopeFromContext and
// ScopeFromHeader return it.
var ErrNoPrincipal = errors.New("idempotency: the request names no principal")

// ScopeFromContext returns a Config.Scope that scopes keys by the principal
// an authentication middleware in front of this one put in the request's
// context under key: a string, or a fmt.Stringer (a user or account id).
// A request without one, or with an empty one, fails with ErrNoPrincipal
// (401). This is the scope to prefer: it follows the account, as Stripe's
// keys do, whatever credentials the client presents.
//
//	mux.Handle("POST /orders", authenticate(keys.Middleware(createOrder)))
//	// where authenticate does r.WithContext(context.WithValue(ctx, userKey{}, userID))
//	// and keys has Config{Scope: idempotency.ScopeFromContext(userKey{})}
func ScopeFromContext(key any) func(*http.Request) (string, error) {
	return func(r *http.Request) (string, error) {
		var s string
		switch v := r.Context().Value(key).(type) {
		case string:
			s = v
		case fmt.Stringer:
			s = v.String()
		case nil:
		default:
			return "", fmt.Errorf("idempotency: the request context's value of %v is a %T: ScopeFromContext takes a string or a fmt.Stringer", key, v)
		}
		if s == "" {
			return "", fmt.Errorf("%w: its context holds none under %v; put the authentication middleware in front of the idempotency middleware", ErrNoPrincipal, key)
		}
		return s, nil
	}
}

// ScopeFromHeader returns a Config.Scope that scopes keys by the value of
// the request header name, such as Authorization or X-Api-Key. The scope
// stored is a SHA-256 digest of the value, "h:" and 43 characters of
// base64, so the keys' table does not hold the credential itself. A
// request without the header fails with ErrNoPrincipal (401).
//
// It suits credentials that stay the same across a request and its
// retries (API keys). A client whose token is refreshed between the two
// gets another scope, and its retry runs again; an unsalted digest of a
// guessable credential (Basic auth with a weak password) can be guessed
// back from the table. Scope by the authenticated principal instead
// (ScopeFromContext) where either can happen.
func ScopeFromHeader(name string) func(*http.Request) (string, error) {
	return func(r *http.Request) (string, error) {
		v := r.Header.Values(name)
		if len(v) == 0 || (len(v) == 1 && v[0] == "") {
			return "", fmt.Errorf("%w: the request has no %s header", ErrNoPrincipal, name)
		}
		h := sha256.New()
		for _, s := range v {
			h.Write([]byte(s))
			h.Write([]byte{0})
		}
		return "h:" + base64.RawURLEncoding.EncodeToString(h.Sum(nil)), nil
	}
}

// OneScopeForAllClients is a Config.Scope that puts every client's keys in
// one scope. Any client that sends another's key with the same method,
// path and body gets that client's stored response (with whatever personal
// data and Location it holds), and a key one client used is taken for
// every other until it expires (Config.Retention). Use it only where a
// single trusted caller sends requests, never on an API that several
// principals call.
func OneScopeForAllClients(*http.Request) (string, error) { return "", nil }
