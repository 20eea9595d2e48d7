package shop

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// balancer is the shop's own load balancer: a reverse proxy in front of
// the instances of a service, as one in front of its processes would be.
// It sends each request to the next instance up, round robin. With none up
// it answers 503; a request whose instance went away meanwhile (crashed,
// its connections dropped) is answered 502. Either way the sender tries
// again later. The balancer never sends a request twice itself: the
// instance may have acted on it.
type balancer struct {
	backends  func() []string // base URLs of the instances up, http://host:port
	transport *http.Transport
	next      atomic.Uint64

	mu      sync.Mutex
	proxies map[string]*httputil.ReverseProxy // by backend URL
}

// newBalancer returns a balancer over the instances backends returns.
func newBalancer(backends func() []string) *balancer {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	return &balancer{backends: backends, transport: t, proxies: map[string]*httputil.ReverseProxy{}}
}

// ServeHTTP implements http.Handler.
func (lb *balancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	up := lb.backends()
	if len(up) == 0 {
		lb.unavailable(w, http.StatusServiceUnavailable, "no instance of the service is up; send the request again later")
		return
	}
	p, err := lb.proxy(up[int(lb.next.Add(1)%uint64(len(up)))])
	if err != nil {
		lb.unavailable(w, http.StatusInternalServerError, err.Error())
		return
	}
	p.ServeHTTP(w, r)
}

// proxy returns the reverse proxy to backend, made on first use.
func (lb *balancer) proxy(backend string) (*httputil.ReverseProxy, error) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if p := lb.proxies[backend]; p != nil {
		return p, nil
	}
	target, err := url.Parse(backend)
	if err != nil {
		return nil, fmt.Errorf("shop: balancer: instance URL %q: %w", backend, err)
	}
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
		},
		Transport: lb.transport,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			lb.unavailable(w, http.StatusBadGateway, "the instance went away ("+err.Error()+"); send the request again")
		},
	}
	lb.proxies[backend] = p
	return p, nil
}

// unavailable answers status with why, in plain text. It sets no
// Retry-After: a webhook sender would hold back every message to the
// endpoint for that long, while the other instance may well be up.
func (lb *balancer) unavailable(w http.ResponseWriter, status int, why string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = fmt.Fprintln(w, why)
}

// close drops the idle connections to the instances.
func (lb *balancer) close() { lb.transport.CloseIdleConnections() }

// balancerServer serves a balancer on a listener of its own.
type balancerServer struct {
	lb   *balancer
	addr string
	srv  *http.Server
	done chan struct{}
	once sync.Once
	err  error
}

// serveBalancer serves lb on ln until stop.
func serveBalancer(ln net.Listener, lb *balancer) *balancerServer {
	s := &balancerServer{lb: lb, addr: ln.Addr().String(), srv: &http.Server{Handler: lb, ReadHeaderTimeout: 5 * time.Second}, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln)
	}()
	return s
}

// stop stops the server, waiting at most a few seconds for the requests in
// flight, and returns once it has stopped. Later calls return the first's
// error.
func (s *balancerServer) stop() error {
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.srv.Shutdown(ctx); err != nil {
			s.err = s.srv.Close()
		}
		<-s.done
		s.lb.close()
	})
	return s.err
}
