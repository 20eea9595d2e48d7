// Package tcpproxy is a TCP proxy that tests put between a client and a
// server to make faults of the network: the server gone and back, a host
// gone silent, a virtual IP moved to another server, chosen frames of the
// server's protocol dropped.
package tcpproxy

import (
	"bufio"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"
)

// Proxy forwards TCP connections to a server, and can go away and come
// back on the same address: to a client behind it, the server is down
// (connections reset, new ones refused), then up again. It can also
// freeze: connections stay open and nothing gets through, as with a host
// gone silent. And it can be pointed at another server (Retarget), as a
// virtual IP or a proxy that follows a database's primary is.
type Proxy struct {
	t testing.TB

	mu     sync.Mutex
	target string
	addr   string
	ln     net.Listener // nil while down
	conns  map[net.Conn]struct{}
	thawed chan struct{} // closed unless frozen
	wg     sync.WaitGroup

	// frames splits what the server sends into the units keep judges;
	// nil forwards whatever each read returns.
	frames func(*bufio.Reader) ([]byte, error)
	// keep reports whether to forward a frame from the server; nil keeps
	// them all.
	keep func([]byte) bool
}

// Start starts a proxy to target (host:port) on a free port of 127.0.0.1;
// it goes down when the test ends.
func Start(t testing.TB, target string) *Proxy {
	p := New(t, target)
	p.Up()
	t.Cleanup(p.Down)
	return p
}

// New returns a proxy to target (host:port) that is not listening yet: Up
// starts it, on a free port of 127.0.0.1, and Down stops it.
func New(t testing.TB, target string) *Proxy {
	thawed := make(chan struct{})
	close(thawed)
	return &Proxy{t: t, target: target, addr: "127.0.0.1:0", conns: map[net.Conn]struct{}{}, thawed: thawed}
}

// Filter makes the proxy split what the server sends with frames and
// forward only the frames keep reports true for; call it before Up.
func (p *Proxy) Filter(frames func(*bufio.Reader) ([]byte, error), keep func([]byte) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frames, p.keep = frames, keep
}

// Up listens again, on the same address, after Down.
func (p *Proxy) Up() {
	p.t.Helper()
	var ln net.Listener
	var err error
	for range 50 { // the port may take a moment to be free again
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		p.t.Fatalf("proxy listen: %v", err)
	}
	p.mu.Lock()
	p.ln, p.addr = ln, ln.Addr().String()
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !p.track(c) {
				continue
			}
			p.wg.Go(func() { p.pipe(c) })
		}
	})
}

// track registers c, or closes it when the proxy went down meanwhile.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) pipe(c net.Conn) {
	defer c.Close()
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	s, err := net.Dial("tcp", target)
	if err != nil || !p.track(s) {
		return
	}
	defer s.Close()
	var wg sync.WaitGroup
	wg.Go(func() { p.copy(s, c, nil); s.Close() })
	p.copy(c, s, p.frames)
	c.Close()
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, s)
	p.mu.Unlock()
}

// copy forwards src to dst, frame by frame when frames is set (from the
// server: see keep), holding what it read while the proxy is frozen.
func (p *Proxy) copy(dst, src net.Conn, frames func(*bufio.Reader) ([]byte, error)) {
	r := bufio.NewReaderSize(src, 32<<10)
	buf := make([]byte, 32<<10)
	for {
		var frame []byte
		var err error
		if frames != nil {
			frame, err = frames(r)
		} else {
			var n int
			n, err = r.Read(buf)
			frame = buf[:n]
		}
		if len(frame) > 0 {
			p.mu.Lock()
			thawed := p.thawed
			p.mu.Unlock()
			<-thawed
			if frames != nil && p.keep != nil && !p.keep(frame) {
				continue
			}
			if _, err := dst.Write(frame); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Freeze stops forwarding: connections stay open, nothing gets through.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.thawed = make(chan struct{})
}

// Thaw forwards again.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
	default:
		close(p.thawed)
	}
}

// Down closes the listener and every connection, and waits until the
// proxy's goroutines are gone.
func (p *Proxy) Down() {
	p.Thaw() // held data then meets closed connections
	p.mu.Lock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
	p.mu.Unlock()
	p.wg.Wait()
}

// Retarget closes every connection and sends the new ones to target
// (host:port), as a failover manager moving a virtual IP to a promoted
// server does.
func (p *Proxy) Retarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
	for c := range p.conns {
		c.Close()
	}
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
}

// URL returns base, a URL, with the proxy's address as its host.
func (p *Proxy) URL(t testing.TB, base string) string {
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse database url: %v", err)
	}
	u.Host = p.Addr()
	return u.String()
}
