package dashboard

import (
	"net/http"
	"time"
)

// The timeouts of the server [NewServer] returns.
const (
	// ReadHeaderTimeout bounds how long a client may take to send a
	// request's headers.
	ReadHeaderTimeout = 10 * time.Second
	// ReadTimeout bounds how long it may take to send a whole request, its
	// form included (at most MaxFormBytes).
	ReadTimeout = 30 * time.Second
	// WriteTimeout bounds how long a request may take from its headers
	// read to its answer written: the store's queries of a page included.
	WriteTimeout = 2 * time.Minute
	// IdleTimeout is how long a kept-alive connection waits for the next
	// request.
	IdleTimeout = 2 * time.Minute
	// MaxHeaderBytes caps a request's headers.
	MaxHeaderBytes = 64 << 10
)

// NewServer returns a server of h (the dashboard, or a mux it is mounted
// in) whose timeouts keep a slow or idle client from holding a connection
// for long: ReadHeaderTimeout, ReadTimeout, WriteTimeout and IdleTimeout.
// Set its Addr, or call its Serve with a listener.
func NewServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
	}
}
