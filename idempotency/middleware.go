package idempotency

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
)

// HeaderKey is the request header carrying the key.
const HeaderKey = "Idempotency-Key"

// HeaderReplayed marks a replayed response.
const HeaderReplayed = "Idempotent-Replayed"

type txKey struct{}

// Tx returns the transaction the middleware opened for the request: the
// handler's business change and outbox messages go in it, and commit with
// the stored response when the handler answers below 400 (a 4xx answer is
// stored without them; see the package documentation). It reports false for
// requests the middleware does not cover (other methods, or no key when keys
// are optional).
func Tx[TTx any](ctx context.Context) (TTx, bool) {
	tx, ok := ctx.Value(txKey{}).(TTx)
	return tx, ok
}

// Middleware enforces idempotency keys on the configured methods (see the
// package documentation for what is stored and what each status means).
// The handler finds its transaction with Tx.
func (k *Keys[TTx]) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !k.required(r.Method) {
			next.ServeHTTP(w, r)
			return
		}
		req, covered, ok := k.readRequest(w, r)
		if !covered {
			next.ServeHTTP(w, r)
			return
		}
		if !ok {
			return
		}
		var rec *recorder
		out, err := k.Do(r.Context(), req, func(ctx context.Context, tx TTx) (Response, error) {
			rec = &recorder{header: http.Header{}, limit: k.cfg.MaxResponseBytes}
			next.ServeHTTP(rec, r.WithContext(context.WithValue(ctx, txKey{}, tx)))
			return rec.response(k.cfg.ReplayHeaders), nil
		})
		if err != nil {
			k.answerError(w, req.Key, err)
			return
		}
		answer(w, out, rec)
	})
}

// answer writes Do's outcome: a replay with the stored headers, a fresh
// response with every header the handler set.
func answer(w http.ResponseWriter, out Outcome, rec *recorder) {
	if out.Replayed {
		for name, vs := range out.Response.Headers {
			w.Header()[name] = vs
		}
		w.Header().Set(HeaderReplayed, "true")
	} else {
		for name, vs := range rec.header {
			w.Header()[name] = vs
		}
	}
	w.WriteHeader(out.Response.Status)
	_, _ = w.Write(out.Response.Body)
}

// readRequest reads the key, the scope and the body of r, and leaves r's
// body readable again. covered is false for a request without a key where
// keys are optional: the middleware lets it through untouched. ok is false
// when the request cannot go on, after a problem was written to w.
func (k *Keys[TTx]) readRequest(w http.ResponseWriter, r *http.Request) (req Request, covered, ok bool) {
	values := r.Header.Values(HeaderKey)
	switch {
	case len(values) == 0 && k.cfg.Optional:
		return req, false, false
	case len(values) == 0:
		problem(w, http.StatusBadRequest, problemKeyMissing, "Idempotency-Key is missing",
			"This operation requires an Idempotency-Key header: send a unique value per operation, such as a UUID, and the same value when you retry it.")
		return req, true, false
	case len(values) > 1:
		problem(w, http.StatusBadRequest, problemKeyInvalid, "Idempotency-Key is invalid",
			"Send exactly one Idempotency-Key header.")
		return req, true, false
	}
	key, err := ParseKey(values[0], k.cfg.MaxKeyLength)
	if err != nil {
		problem(w, http.StatusBadRequest, problemKeyInvalid, "Idempotency-Key is invalid", err.Error())
		return req, true, false
	}
	scope, err := k.cfg.Scope(r)
	if errors.Is(err, ErrNoPrincipal) {
		problem(w, http.StatusUnauthorized, problemNoPrincipal, "Request has no principal",
			"Idempotency keys are kept per client, and this request does not say which client sends it: send your credentials.")
		return req, true, false
	}
	if err != nil {
		k.cfg.Logger.Error("idempotency scope", "error", err)
		problem(w, http.StatusInternalServerError, problemScope, "Idempotency scope unavailable",
			"The server could not tell whose key this is; try again.")
		return req, true, false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, k.cfg.MaxBodyBytes+1))
	if err != nil {
		problem(w, http.StatusBadRequest, problemBodyUnreadable, "Request body unreadable", err.Error())
		return req, true, false
	}
	if int64(len(body)) > k.cfg.MaxBodyBytes {
		problem(w, http.StatusRequestEntityTooLarge, problemBodyTooLarge, "Request body too large",
			"The body exceeds "+strconv.FormatInt(k.cfg.MaxBodyBytes, 10)+" bytes.")
		return req, true, false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return Request{Scope: scope, Key: key, Fingerprint: Fingerprint(r.Method, r.URL.RequestURI(), body)}, true, true
}

// answerError writes the problem that Do's error err calls for.
func (k *Keys[TTx]) answerError(w http.ResponseWriter, key string, err error) {
	var inFlight *InFlightError
	switch {
	case errors.As(err, &inFlight):
		w.Header().Set("Retry-After", strconv.Itoa(int(inFlight.RetryAfter.Seconds()+0.999)))
		problem(w, http.StatusConflict, problemKeyInUse, "A request with this Idempotency-Key is in progress",
			"Retry after the time in Retry-After to get its response.")
	case errors.Is(err, ErrMismatch):
		problem(w, http.StatusUnprocessableEntity, problemKeyReused, "Idempotency-Key reused",
			"This key was used for a different request (method, path or body). Use a new key for a new operation.")
	case errors.Is(err, ErrResponseTooLarge):
		k.cfg.Logger.Warn("idempotent response not stored: it is larger than idempotency.Config.MaxResponseBytes; raise it, or answer with less",
			"key", key, "max_response_bytes", k.cfg.MaxResponseBytes)
		problem(w, http.StatusInternalServerError, problemTooLarge, "Response too large to store",
			"The response is larger than the server stores for replay; the request was not applied.")
	case errors.Is(err, ErrLostKey):
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusConflict, problemTimedOut, "Request timed out",
			"The request took longer than the server allows and was undone; retry it with the same key.")
	default:
		k.cfg.Logger.Error("idempotent request failed", "key", key, "error", err)
		problem(w, http.StatusInternalServerError, problemInternal, "Internal error", "The request was not applied; retry it with the same key.")
	}
}

// recorder captures a handler's response so it can be stored and then sent.
// It keeps at most limit+1 bytes of body, enough for Do to tell that the
// response is over the limit, and fails the writes past that.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
	limit  int64
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if room := r.limit + 1 - int64(r.body.Len()); int64(len(b)) > room {
		n, _ := r.body.Write(b[:max(room, 0)])
		return n, ErrResponseTooLarge
	}
	return r.body.Write(b)
}

func (r *recorder) response(keep []string) Response {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	h := http.Header{}
	for _, name := range keep {
		if vs := r.header.Values(name); len(vs) > 0 {
			h[http.CanonicalHeaderKey(name)] = vs
		}
	}
	return Response{Status: r.status, Headers: h, Body: bytes.Clone(r.body.Bytes())}
}

// ProblemTypes is the page describing the problems the middleware answers
// with, as RFC 9457 problem details (Content-Type application/problem+json).
// Each problem's type is this address, a '#' and the problem's name, such as
// ProblemTypes + "#idempotency-key-missing"; the page has a section of that
// name for each. Clients branch on the type, not on the title or detail.
const ProblemTypes = "https://github.com/courier-go/courier/blob/main/docs/idempotency.md"

// problemType is the name of a problem the middleware answers with: the
// fragment of its type, and the heading of its section in the page at
// ProblemTypes. Each has one title.
type problemType string

// The problems the middleware answers with. A new one needs its section in
// docs/idempotency.md (a test checks each constant has one).
const (
	problemKeyMissing     problemType = "idempotency-key-missing"
	problemKeyInvalid     problemType = "idempotency-key-invalid"
	problemScope          problemType = "idempotency-scope"
	problemNoPrincipal    problemType = "idempotency-principal-missing"
	problemBodyUnreadable problemType = "body-unreadable"
	problemBodyTooLarge   problemType = "body-too-large"
	problemKeyInUse       problemType = "idempotency-key-in-use"
	problemKeyReused      problemType = "idempotency-key-reused"
	problemTimedOut       problemType = "request-timed-out"
	problemTooLarge       problemType = "response-too-large"
	problemInternal       problemType = "internal"
)

// problem writes an RFC 9457 problem detail.
func problem(w http.ResponseWriter, status int, kind problemType, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type":   ProblemTypes + "#" + string(kind),
		"title":  title,
		"status": status,
		"detail": detail,
	})
}
