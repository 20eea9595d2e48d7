// Package idempotency makes HTTP entry points safe to retry with the
// Idempotency-Key header (IETF draft-ietf-httpapi-idempotency-key-header):
// a request with a key takes effect once, and a retry gets the first
// response back.
//
// A request with a new key claims it in a short transaction of its own
// (state in flight), then runs the handler in a transaction that also stores
// the response and marks the key done, so the business change, its outbox
// messages and the stored response commit together or not at all (a 4xx
// answer is stored without them, see below). Then:
//
//   - same key, same request (method, path and query, body), done: the stored
//     status, chosen headers and body are replayed byte for byte with
//     Idempotent-Replayed: true, and the handler does not run;
//   - same key, different request: 422;
//   - same key while the first is in flight: 409 with Retry-After, a short
//     hint: about as long as the first has run so far, 1 to 10 seconds,
//     never past the first one's lock (see InFlightError);
//   - a key whose first request's owner crashed is taken over once its lock
//     (Config.LockTimeout) expires, if the request is the same;
//   - keys expire after Config.Retention; a request after that runs anew.
//
// What is stored: every response the handler completes with a status below
// 500. A 2xx or 3xx response commits with the handler's work. A 4xx response
// is stored and replayed too (the request was processed; retrying it cannot
// succeed differently), but it says the request was not applied, so nothing
// of the handler's work commits with it: no business change, no outbox
// message. Its transaction is rolled back and the response is stored in a
// short transaction of its own. That is what makes the dialects agree when
// one of the handler's statements failed before it answered 4xx: PostgreSQL
// has then aborted the transaction and accepts no further statement, while
// SQLite and MySQL keep the statements that ran before the failure. A
// savepoint around the handler would do as well, but it needs a statement
// of each dialect's and costs every request two more round trips; the
// separate transaction costs only the 4xx ones. A handler that must keep a
// record of a rejected request (an audit row) writes it outside the key's
// transaction. After a failed statement answer 4xx or 5xx, never 2xx: on
// PostgreSQL the commit would fail (500, key released), on SQLite and MySQL
// the statements before the failure would commit.
//
// What is not stored: requests rejected before the handler (missing or
// invalid key: 400; body too large: 413; no principal: 401; the 409 and
// 422 above), a 5xx response or a handler error (the transaction rolls
// back and the key is released, so the client may retry at once), a panic
// (likewise, then the panic continues), and a response whose body is over
// Config.MaxResponseBytes (likewise; the client gets 500
// response-too-large, never a truncated body). Put authentication and rate
// limiting before the middleware: what they reject stores nothing.
//
// On SQLite, idempotent requests run one at a time per database file,
// unrelated keys included: the request's transaction holds SQLite's single
// write lock from before the handler runs until it commits, so the next
// request, and every other writer of the file, waits for it; a retry of a
// key in flight waits too and usually gets the stored response instead of
// a 409. Keep handlers short there (no calls to other services: write an
// outbox message instead), or use PostgreSQL or MySQL, where requests with
// different keys run in parallel. store/sqlite's SQLIdempotency has the
// details.
//
// The middleware's own answers are RFC 9457 problem details
// (application/problem+json); each type is described at ProblemTypes, the
// page docs/idempotency.md of this repository.
//
// Keys are kept per scope, the part of the key the server knows: the
// authenticated principal, so that a client never gets another's response
// nor blocks another's key. Config.Scope is required; ScopeFromContext
// reads the principal that authentication put in the request's context,
// ScopeFromHeader hashes a credential header such as Authorization, and
// OneScopeForAllClients (one scope shared by every client) is for a single
// trusted caller only.
//
//	keys, err := idempotency.New(postgres.NewDriver(pool).Idempotency(), idempotency.Config{
//		Scope: idempotency.ScopeFromContext(userKey{}), // set by the authentication in front
//	})
//	if err != nil {
//		return err
//	}
//	mux.Handle("POST /orders", keys.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
//		tx, ok := idempotency.Tx[pgx.Tx](r.Context()) // the key's transaction
//		if !ok { // not covered: no key, where keys are optional
//			…
//		}
//		// insert the order and its outbox message in tx; when either fails, answer 5xx: both roll back …
//	})))
package idempotency

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/setting"
	"github.com/courier-go/courier/store"
)

// Config tunes Keys. Zero fields take the defaults given.
type Config struct {
	// Methods that require a key. Default POST and PATCH.
	Methods []string
	// Optional makes the key optional on those methods: requests without
	// one run without protection. Default: required (400 without).
	Optional bool
	// MaxKeyLength caps the key, in bytes. Default MaxKeyLength (255).
	MaxKeyLength int
	// MaxBodyBytes caps the request body; larger ones get 413 before
	// anything is stored. Default DefaultMaxBodyBytes (1 MiB).
	MaxBodyBytes int64
	// MaxResponseBytes caps the response body stored for replay, which
	// the middleware holds in memory until the key's transaction commits.
	// A larger response is not stored: its transaction rolls back, the key
	// is released and the client gets 500 (problem response-too-large),
	// never a truncated body; the middleware buffers no more than the
	// limit however much the handler writes. Default
	// DefaultMaxResponseBytes (1 MiB).
	MaxResponseBytes int64
	// LockTimeout is how long a request holds its key; a request still
	// running after it loses the key to a retry (and its transaction is
	// rolled back). At least 1s; default DefaultLockTimeout (1 minute).
	LockTimeout time.Duration
	// Retention is how long a key is remembered, at least LockTimeout.
	// Default DefaultRetention (24 hours).
	Retention time.Duration
	// Scope returns the part of the key the server knows: the
	// authenticated principal (ScopeFromContext) or the client's
	// credentials (ScopeFromHeader), so that one client never gets
	// another's stored response nor blocks another's key. Required: New
	// fails without it. OneScopeForAllClients shares every key among all
	// clients, for a single trusted caller. A function that returns an
	// error wrapping ErrNoPrincipal gets the request answered 401; any
	// other error, 500. A program that only calls Do, whose Request
	// carries its scope, sets any.
	Scope func(*http.Request) (string, error)
	// ReplayHeaders are the response headers stored and replayed. Default
	// Content-Type, Content-Language, Location, ETag, Link.
	ReplayHeaders []string
	// Logger receives the middleware's logs. Default: discard.
	Logger *slog.Logger
	// Clock is the time a request that finds its key in flight counts the
	// other attempt's lock from (InFlightError's RetryAfter and
	// LockedFor). Default: the real clock. The lock's end itself, and a
	// key's expiry, are set and compared by the store with its own clock
	// (the database's, unless the store was given one), so a test that
	// moves time sets the same clock on both.
	Clock courier.Clock
}

// The defaults of Config's zero fields (MaxKeyLength's is MaxKeyLength).
const (
	DefaultMaxBodyBytes     = 1 << 20
	DefaultMaxResponseBytes = 1 << 20
	DefaultLockTimeout      = time.Minute
	DefaultRetention        = 24 * time.Hour
)

func (c *Config) setDefaults() {
	if len(c.Methods) == 0 {
		c.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	if c.MaxKeyLength == 0 {
		c.MaxKeyLength = MaxKeyLength
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxResponseBytes == 0 {
		c.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if c.LockTimeout == 0 {
		c.LockTimeout = DefaultLockTimeout
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.ReplayHeaders == nil {
		c.ReplayHeaders = []string{"Content-Type", "Content-Language", "Location", "ETag", "Link"}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

func (c *Config) validate() error {
	if c.Scope == nil {
		return errors.New("idempotency: Config.Scope is nil: set it to the request's principal, such as " +
			"idempotency.ScopeFromContext(yourUserKey) (behind your authentication) or idempotency.ScopeFromHeader(\"Authorization\"), " +
			"so that one client never gets another's stored response; idempotency.OneScopeForAllClients shares every key among all clients")
	}
	if i := slices.Index(c.Methods, ""); i >= 0 {
		return fmt.Errorf("idempotency: Config.Methods[%d] is empty: name an HTTP method, such as POST", i)
	}
	if err := setting.First(
		setting.Positive("idempotency: Config.MaxKeyLength", c.MaxKeyLength, MaxKeyLength),
		setting.Positive("idempotency: Config.MaxBodyBytes", c.MaxBodyBytes, DefaultMaxBodyBytes),
		setting.Positive("idempotency: Config.MaxResponseBytes", c.MaxResponseBytes, DefaultMaxResponseBytes),
	); err != nil {
		return err
	}
	switch {
	case c.LockTimeout < time.Second:
		return fmt.Errorf("idempotency: Config.LockTimeout is %s: use at least 1s, or 0 for %s", c.LockTimeout, DefaultLockTimeout)
	case c.Retention < c.LockTimeout:
		return fmt.Errorf("idempotency: Config.Retention is %s, shorter than LockTimeout (%s): use %s or more, or 0 for %s", c.Retention, c.LockTimeout, c.LockTimeout, DefaultRetention)
	}
	return nil
}

// Validate reports whether New would accept c: nil, or an error naming the
// field and the fix. Zero fields take their defaults first, as in New.
// Programs that do work before New call it first, so that a bad setting
// fails before anything happens.
func (c Config) Validate() error {
	c.setDefaults()
	return c.validate()
}

// Keys handles idempotency keys on one database. It is safe for concurrent
// use.
type Keys[TTx any] struct {
	st  store.Idempotency[TTx]
	cfg Config
}

// New returns Keys on st.
func New[TTx any](st store.Idempotency[TTx], cfg Config) (*Keys[TTx], error) {
	if st == nil {
		return nil, errors.New("idempotency: store is nil: pass the dialect's, e.g. postgres.NewDriver(pool).Idempotency()")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	return &Keys[TTx]{st: st, cfg: cfg}, nil
}

// Request identifies one attempt at an operation.
type Request struct {
	// Scope is the server-side part of the key (the principal).
	Scope string
	// Key is the client's key.
	Key string
	// Fingerprint identifies the request's content (see Fingerprint).
	Fingerprint []byte
}

// Response is what an operation produced; Do stores it for replay.
type Response = store.StoredResponse

// ErrMismatch: the key was used before for a different request.
var ErrMismatch = errors.New("idempotency: key reused for a different request")

// ErrResponseTooLarge: the operation's response body is over
// Config.MaxResponseBytes; it was not stored, its transaction was rolled
// back and its key released.
var ErrResponseTooLarge = errors.New("idempotency: the response is larger than Config.MaxResponseBytes allows storing")

// ErrLostKey: the operation outlived its lock and another attempt took the
// key over; this attempt's transaction was rolled back.
var ErrLostKey = errors.New("idempotency: the request took longer than the lock timeout and another attempt took over its key")

// InFlightError: another attempt with the same key is still running.
type InFlightError struct {
	// RetryAfter is when to ask again: about as long as the other attempt
	// has run so far, between 1 and 10 seconds, and no later than its lock
	// ends (see retryAfter). The middleware sends it as Retry-After.
	RetryAfter time.Duration
	// LockedFor is how long the other attempt's lock lasts at the latest:
	// after that, a retry of the same request takes the key over.
	LockedFor time.Duration
}

func (e *InFlightError) Error() string {
	return fmt.Sprintf("idempotency: a request with this key is in progress; retry in %s", e.RetryAfter.Round(time.Second))
}

// Bounds of InFlightError.RetryAfter.
const (
	minRetryAfter = time.Second
	maxRetryAfter = 10 * time.Second
)

// retryAfter is the hint given to a request that finds its key in flight,
// from how long the lock has left and this process's lock timeout. Most
// requests take well under a second, and a client told to wait out the
// whole lock (a minute by default) would wait that long for an answer that
// was ready much sooner. The attempt in flight has run for about lockTimeout
// minus lockLeft; one that has run that long is likely to need about as long
// again, so the hint is that running time, at least 1 second (Retry-After
// counts whole seconds) and at most 10, so that a slow request does not
// make its retries sleep for long. It is never later than the lock ends,
// when a retry takes the key over. The running time is an estimate: the
// lock was set with the lock timeout of the process that claimed the key,
// and on PostgreSQL and MySQL by the database's clock.
func retryAfter(lockLeft, lockTimeout time.Duration) time.Duration {
	ran := lockTimeout - lockLeft
	hint := min(max(ran, minRetryAfter), maxRetryAfter)
	return min(hint, max(lockLeft, minRetryAfter))
}

// claimedBefore is Do's answer when another call holds or held the key of
// req, as rec records it.
func (k *Keys[TTx]) claimedBefore(rec store.KeyRecord, req Request) (Outcome, error) {
	switch {
	case !bytes.Equal(rec.Fingerprint, req.Fingerprint):
		return Outcome{}, ErrMismatch
	case rec.Done:
		return Outcome{Response: rec.Response, Replayed: true}, nil
	default:
		left := rec.LockedUntil.Sub(k.cfg.Clock.Now())
		return Outcome{}, &InFlightError{RetryAfter: retryAfter(left, k.cfg.LockTimeout), LockedFor: max(left, 0)}
	}
}

// releaseTimeout bounds releasing a key, which outlives the request's
// context.
const releaseTimeout = 5 * time.Second

// release frees the key of req that owner claimed, so a retry need not wait
// for the lock timeout.
func (k *Keys[TTx]) release(ctx context.Context, req Request, owner uuid.UUID) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := k.st.Release(rctx, req.Scope, req.Key, owner); err != nil {
		k.cfg.Logger.Warn("could not release idempotency key; it frees itself after the lock timeout", "key", req.Key, "error", err)
	}
}

// Outcome is Do's result.
type Outcome struct {
	// Response is the operation's response, fresh or stored.
	Response Response
	// Replayed is true when the operation ran before and Response is the
	// stored one.
	Replayed bool
}

// Do runs fn once per (scope, key). The first call claims the key and runs fn
// in a new transaction. When fn succeeds with a status below 400, that
// transaction also stores fn's response and commits. When fn answers 4xx,
// the transaction is rolled back and the response is stored in a
// transaction of its own: a 4xx commits nothing of fn's work. Later calls
// with the same request get the stored response back with Replayed set. It
// returns ErrMismatch, an *InFlightError, ErrLostKey or ErrResponseTooLarge
// as described on each; when fn fails (an error, a 5xx or a panic) or its
// response's body is over Config.MaxResponseBytes, nothing is stored and
// the key is released.
func (k *Keys[TTx]) Do(ctx context.Context, req Request, fn func(ctx context.Context, tx TTx) (Response, error)) (Outcome, error) {
	owner := uuid.New()
	rec, mine, err := k.st.Claim(ctx, store.KeyClaim{
		Scope: req.Scope, Key: req.Key, Fingerprint: req.Fingerprint, Owner: owner,
		LockFor: k.cfg.LockTimeout, Retain: k.cfg.Retention,
	})
	if err != nil {
		return Outcome{}, err
	}
	if !mine {
		return k.claimedBefore(rec, req)
	}
	released := false
	release := func() {
		if !released {
			released = true
			k.release(ctx, req, owner)
		}
	}
	defer func() {
		if p := recover(); p != nil {
			release()
			panic(p)
		}
	}()
	complete := func(tx TTx, resp Response) error {
		ok, err := k.st.Complete(ctx, tx, req.Scope, req.Key, owner, resp)
		if err != nil {
			return err
		}
		if !ok {
			return ErrLostKey
		}
		return nil
	}
	var resp Response
	err = k.st.InTx(ctx, func(tx TTx) error {
		var err error
		if resp, err = fn(ctx, tx); err != nil {
			return err
		}
		switch {
		case int64(len(resp.Body)) > k.cfg.MaxResponseBytes:
			return ErrResponseTooLarge
		case resp.Status >= 500:
			return errServerError
		case resp.Status >= 400:
			return errClientError
		}
		return complete(tx, resp)
	})
	if errors.Is(err, errClientError) {
		// fn's work is rolled back; its answer is stored on its own (see
		// the package documentation).
		err = k.st.InTx(ctx, func(tx TTx) error { return complete(tx, resp) })
	}
	switch {
	case err == nil:
		return Outcome{Response: resp}, nil
	case errors.Is(err, errServerError):
		release()
		return Outcome{Response: resp}, nil // not stored, but it is the answer
	case errors.Is(err, ErrLostKey):
		return Outcome{}, err
	default:
		release()
		return Outcome{}, err
	}
}

var (
	errServerError = errors.New("5xx response")
	errClientError = errors.New("4xx response")
)

// Cleanup deletes expired keys and returns how many.
func (k *Keys[TTx]) Cleanup(ctx context.Context) (int64, error) {
	var total int64
	for {
		n, err := k.st.DeleteExpired(ctx, 10000)
		total += n
		if err != nil || n < 10000 {
			return total, err
		}
	}
}

func (k *Keys[TTx]) required(method string) bool { return slices.Contains(k.cfg.Methods, method) }
