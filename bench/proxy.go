package main

import (
	"io"
	"net"
	"sync"
)

// freezeProxy forwards TCP connections to a target and can freeze: the
// connections stay open and nothing gets through, as with a host cut off
// by the network, until it thaws.
type freezeProxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	thawed chan struct{} // closed unless frozen
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

// startProxy starts a proxy to target (host:port) on a free port of
// 127.0.0.1.
func startProxy(target string) (*freezeProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &freezeProxy{ln: ln, target: target, thawed: make(chan struct{}), conns: map[net.Conn]bool{}}
	close(p.thawed)
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.pipe(c) })
		}
	})
	return p, nil
}

// addr is the proxy's host:port.
func (p *freezeProxy) addr() string { return p.ln.Addr().String() }

func (p *freezeProxy) pipe(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[s] = true, true
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { p.copy(s, c); s.Close() })
	p.copy(c, s)
	c.Close()
	wg.Wait()
}

// copy forwards src to dst, holding what it read while the proxy is frozen.
func (p *freezeProxy) copy(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			thawed := p.thawed
			p.mu.Unlock()
			<-thawed
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// freeze stops forwarding until thaw.
func (p *freezeProxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.thawed = make(chan struct{})
}

// thaw forwards again.
func (p *freezeProxy) thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
	default:
		close(p.thawed)
	}
}

// close stops listening, closes every connection and waits until the
// proxy's goroutines are gone.
func (p *freezeProxy) close() {
	p.thaw()
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
