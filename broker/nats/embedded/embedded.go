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
)

// Config describes an embedded server.
type Config struct {
	// Dir holds the JetStream store. Required: the store must survive a
	// restart for the outbox's guarantee to mean anything.
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
	srv *server.Server
}

// Start starts a server and waits until it accepts connections. It creates
// Dir if missing and fails at once when it cannot write there (the server
// itself would only fail to become ready), or when Port is taken.
func Start(cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, errors.New("embedded nats: Config.Dir is empty: give a directory for the JetStream store")
	}
	if err := UsableDir(cfg.Dir); err != nil {
		return nil, fmt.Errorf("embedded nats: Config.Dir: %w", err)
	}
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
	return &Server{srv: srv}, nil
}

// ClientURL is the nats:// URL clients connect to.
func (s *Server) ClientURL() string { return s.srv.ClientURL() }

// Shutdown stops the server and waits until it has stopped.
func (s *Server) Shutdown() {
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
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
