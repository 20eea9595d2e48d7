package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// EnvMariaDBServer is the path of a MariaDB server binary (mariadbd), with
// mariadb-install-db on the PATH. Tests that crash a MySQL-dialect server
// or promote a replica run servers of their own from it, so the shared one
// stays up for the others. .ci/run sets it.
const EnvMariaDBServer = "COURIER_TEST_MARIADB_SERVER"

// MariaDBServer is a MariaDB server the test runs as a child process, on a
// data directory and port of its own, with the binary log on (GTIDs) and a
// database test. It is killed when the test ends.
type MariaDBServer struct {
	// DSN connects to its database test as root (github.com/go-sql-driver/mysql).
	DSN string

	t        testing.TB
	bin      string
	dir      string
	port     int
	id       int
	cred     *syscall.Credential
	settings []string
	cmd      *exec.Cmd
	done     chan struct{}
}

// StartMariaDB initialises a data directory and starts a server on it,
// server_id 1, with settings ("name=value", as mariadbd's --name=value) on
// top of the defaults, and creates the database test.
func StartMariaDB(t testing.TB, settings ...string) *MariaDBServer {
	t.Helper()
	s := newMariaDB(t, 1, settings)
	s.Start()
	s.Exec("CREATE DATABASE test")
	return s
}

// StartMariaDBReplica starts a server (server_id 2, its binary log on so
// that it can be promoted) replicating primary from the start of its
// binary log by GTID (MASTER_USE_GTID = slave_pos), and waits until it has
// the database test.
func StartMariaDBReplica(t testing.TB, primary *MariaDBServer, settings ...string) *MariaDBServer {
	t.Helper()
	s := newMariaDB(t, primary.id+1, settings)
	s.Start()
	s.Exec(fmt.Sprintf("CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = %d, MASTER_USER = 'root', MASTER_CONNECT_RETRY = 1, MASTER_USE_GTID = slave_pos", primary.port))
	s.Exec("START SLAVE")
	deadline := time.Now().Add(30 * time.Second)
	for {
		db := s.open("")
		var n int
		err := db.QueryRow("SELECT count(*) FROM information_schema.schemata WHERE schema_name = 'test'").Scan(&n)
		_ = db.Close()
		if err == nil && n == 1 {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("the MariaDB replica on port %d has no database test after 30s (%v)", s.port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// newMariaDB returns a server, not started, on a new, initialised data
// directory and a free port; as root, it runs as the user mysql.
func newMariaDB(t testing.TB, id int, settings []string) *MariaDBServer {
	t.Helper()
	bin := Need(t, EnvMariaDBServer)
	s := &MariaDBServer{t: t, bin: bin, port: FreePort(t), id: id, settings: settings}
	base, err := os.MkdirTemp("", "courier-mariadb-")
	Must(t, err, "temp dir")
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	s.dir = filepath.Join(base, "data")
	args := []string{"--no-defaults", "--datadir=" + s.dir, "--auth-root-authentication-method=normal", "--skip-test-db"}
	if s.cred = runAs(t, "mysql", base); s.cred != nil {
		args = append(args, "--user=mysql")
	}
	cmd := exec.Command("mariadb-install-db", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mariadb-install-db: %v\n%s", err, out)
	}
	s.DSN = fmt.Sprintf("root@tcp(127.0.0.1:%d)/test?parseTime=true", s.port)
	t.Cleanup(s.Crash)
	return s
}

// Port is the server's port on 127.0.0.1.
func (s *MariaDBServer) Port() int { return s.port }

// Start starts the server (again) and waits until it accepts queries.
func (s *MariaDBServer) Start() {
	s.t.Helper()
	args := []string{"--no-defaults", "--datadir=" + s.dir, "--port=" + strconv.Itoa(s.port), "--bind-address=127.0.0.1",
		"--socket=" + filepath.Join(filepath.Dir(s.dir), "mysqld.sock"), "--pid-file=" + filepath.Join(filepath.Dir(s.dir), "mysqld.pid"),
		"--server-id=" + strconv.Itoa(s.id), "--log-bin=binlog", "--log-slave-updates", "--binlog-format=ROW",
		"--innodb-buffer-pool-size=64M", "--innodb-flush-log-at-trx-commit=2", "--log-error=" + filepath.Join(filepath.Dir(s.dir), "mariadb.log")}
	if s.cred != nil {
		args = append(args, "--user=mysql")
	}
	for _, kv := range s.settings {
		args = append(args, "--"+kv)
	}
	cmd := exec.Command(s.bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	Must(s.t, cmd.Start(), "start mariadbd")
	s.cmd, s.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(s.done)
	deadline := time.Now().Add(30 * time.Second)
	for {
		db := s.open("")
		err := db.Ping()
		_ = db.Close()
		if err == nil {
			return
		}
		select {
		case <-s.done:
			out, _ := os.ReadFile(filepath.Join(filepath.Dir(s.dir), "mariadb.log"))
			s.t.Fatalf("mariadbd exited at start: %s", out)
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("mariadbd does not answer on port %d after 30s: %v", s.port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// open opens a pool on database (none when empty) as root.
func (s *MariaDBServer) open(database string) *sql.DB {
	db, err := sql.Open("mysql", fmt.Sprintf("root@tcp(127.0.0.1:%d)/%s?timeout=1s", s.port, database))
	Must(s.t, err, "open")
	return db
}

// Exec runs one statement as root, failing the test on an error.
func (s *MariaDBServer) Exec(query string) {
	s.t.Helper()
	db := s.open("")
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, query); err != nil {
		s.t.Fatalf("mariadb on port %d: %s: %v", s.port, query, err)
	}
}

// GlobalStatus returns one of the server's status variables (SHOW GLOBAL
// STATUS), "" when it has none of that name.
func (s *MariaDBServer) GlobalStatus(name string) string {
	s.t.Helper()
	db := s.open("")
	defer db.Close()
	var n, v string
	if err := db.QueryRow("SHOW GLOBAL STATUS WHERE Variable_name = '"+strings.ReplaceAll(name, "'", "")+"'").Scan(&n, &v); err != nil { // SHOW cannot be prepared
		return ""
	}
	return v
}

// Promote makes a replica a primary, as a failover manager would once the
// primary is gone: it stops receiving, applies what it had received
// (MASTER_GTID_WAIT on the received position), forgets its primary and
// accepts writes.
func (s *MariaDBServer) Promote() {
	s.t.Helper()
	s.Exec("STOP SLAVE IO_THREAD")
	db := s.open("")
	defer db.Close()
	received := s.replicaStatus(db, "Gtid_IO_Pos")
	var waited int
	Must(s.t, db.QueryRow("SELECT MASTER_GTID_WAIT(?, 30)", received).Scan(&waited), "wait for the replica to apply "+received)
	if waited != 0 {
		s.t.Fatalf("the MariaDB replica on port %d did not apply %s within 30s", s.port, received)
	}
	s.Exec("STOP SLAVE")
	s.Exec("RESET SLAVE ALL")
	s.Exec("SET GLOBAL read_only = OFF")
}

// replicaStatus returns one column of SHOW SLAVE STATUS.
func (s *MariaDBServer) replicaStatus(db *sql.DB, column string) string {
	s.t.Helper()
	rows, err := db.Query("SHOW SLAVE STATUS")
	Must(s.t, err, "show slave status")
	defer rows.Close()
	cols, err := rows.Columns()
	Must(s.t, err, "show slave status")
	if !rows.Next() {
		s.t.Fatalf("the MariaDB server on port %d is not a replica", s.port)
	}
	vals := make([]sql.RawBytes, len(cols))
	dest := make([]any, len(cols))
	for i := range vals {
		dest[i] = &vals[i]
	}
	Must(s.t, rows.Scan(dest...), "show slave status")
	for i, c := range cols {
		if c == column {
			return string(vals[i])
		}
	}
	s.t.Fatalf("SHOW SLAVE STATUS has no column %s", column)
	return ""
}

// Crash kills the server with SIGKILL, as a crash of its host would, and
// waits for it to exit.
func (s *MariaDBServer) Crash() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
	s.cmd = nil
}
