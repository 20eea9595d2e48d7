package embedded

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/courier-go/courier/internal/dirlock"
)

// Config describes an embedded server.
type Config struct {
	// Dir holds the JetStream store. Required: the store must survive a
	// restart for the outbox's guarantee to mean anything. The server
	// holds it alone: Start refuses a Dir another server has (see the
	// package documentation).
	Dir string
	// Host to listen on. Default 127.0.0.1.
	Host string
	// Port to listen on; 0 picks a free port. Default 0.
	Port int
	// NoSync turns off fsync-before-ack. Faster, but a power loss can lose
	// messages the server acknowledged. Tests may use it; production should
	// not.
	NoSync bool
	// Debug logs the server's protocol traffic to stderr.
	Debug bool
}

// Server is a running embedded NATS server.
type Server struct {
	srv  *server.Server
	lock *dirlock.Lock
}

// DirInUseError is returned by Start when another embedded server, in
// this process or another, has Config.Dir. Its clients should connect to
// that server (URL) instead of starting one of their own.
type DirInUseError struct {
	// Dir is the store directory.
	Dir string
	// PID is the process that has it; 0 when its lock file does not say.
	PID int
	// URL is the client URL of the server that has it; "" while that
	// server is starting (or when its lock file does not say).
	URL string
}

// Error says whose Dir is, and what to do.
func (e *DirInUseError) Error() string {
	who := "another process"
	if e.PID != 0 {
		who = "process " + strconv.Itoa(e.PID)
	}
	if e.URL == "" {
		return fmt.Sprintf("embedded nats: the JetStream store %s is in use by %s (its server is starting): connect to that server, or give this one another directory", e.Dir, who)
	}
	return fmt.Sprintf("embedded nats: the JetStream store %s is in use by %s, serving at %s: connect to that server, or give this one another directory", e.Dir, who, e.URL)
}

// Start starts a server and waits until it accepts connections. It creates
// Dir if missing and fails at once when it cannot write there (the server
// itself would only fail to become ready), with a *DirInUseError when
// another server has Dir, or when Port is taken.
func Start(cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, errors.New("embedded nats: Config.Dir is empty: give a directory for the JetStream store")
	}
	if err := UsableDir(cfg.Dir); err != nil {
		return nil, fmt.Errorf("embedded nats: Config.Dir: %w", err)
	}
	lock, err := dirlock.Acquire(cfg.Dir)
	if err != nil {
		var held *dirlock.HeldError
		if errors.As(err, &held) {
			return nil, &DirInUseError{Dir: cfg.Dir, PID: held.Owner.PID, URL: held.Owner.URL}
		}
		return nil, fmt.Errorf("embedded nats: Config.Dir: %w", err)
	}
	srv, err := start(cfg)
	if err != nil {
		lock.Release()
		return nil, err
	}
	if err := lock.SetURL(srv.ClientURL()); err != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
		lock.Release()
		return nil, fmt.Errorf("embedded nats: Config.Dir: %w", err)
	}
	return &Server{srv: srv, lock: lock}, nil
}

// start starts the server on cfg, a Dir this process holds.
func start(cfg Config) (*server.Server, error) {
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	port := cfg.Port
	if port == 0 {
		port = server.RANDOM_PORT
	} else {
		// nats-server only logs a failed listen; find out at once.
		l, err := net.Listen("tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(port)))
		if err != nil {
			return nil, fmt.Errorf("embedded nats: cannot listen on %s:%d: %w", cfg.Host, port, err)
		}
		l.Close()
	}
	opts := &server.Options{
		ServerName: "courier-embedded",
		Host:       cfg.Host,
		Port:       port,
		JetStream:  true,
		StoreDir:   cfg.Dir,
		SyncAlways: !cfg.NoSync,
		NoSigs:     true,
		NoLog:      !cfg.Debug,
		Debug:      cfg.Debug,
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	if cfg.Debug {
		srv.ConfigureLogger()
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("embedded nats: not ready after 10s on %s:%d (JetStream store in %s)", cfg.Host, cfg.Port, cfg.Dir)
	}
	return srv, nil
}

// ClientURL is the nats:// URL clients connect to.
func (s *Server) ClientURL() string { return s.srv.ClientURL() }

// Shutdown stops the server, waits until it has stopped and then lets
// another server have its Dir. Calling it again does nothing.
func (s *Server) Shutdown() {
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
	s.lock.Release()
}

// UsableDir creates dir if it is missing and checks that files can be
// created in it, as the JetStream store must. The error names dir and says
// what is wrong with it.
func UsableDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cannot create directory %s: %w", dir, unwrapPath(err))
	}
	f, err := os.CreateTemp(dir, ".courier-probe-*")
	if err != nil {
		return fmt.Errorf("cannot write in directory %s: %w", dir, unwrapPath(err))
	}
	name := f.Name()
	_ = f.Close()
	return os.Remove(name)
}

// unwrapPath drops the path an *fs.PathError repeats.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
