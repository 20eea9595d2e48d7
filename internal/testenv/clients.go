package testenv

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Environment variables naming the interpreters and drivers of the
// outbox's clients in other languages (clients/python, clients/node).
const (
	// EnvPython is a Python 3 interpreter that imports psycopg (3),
	// PyMySQL and MySQLdb (whose tests are skipped without it); sqlite3 is
	// Python's own. On Debian: /usr/bin/python3 with the packages
	// python3-psycopg, python3-pymysql and python3-mysqldb.
	EnvPython = "COURIER_TEST_PYTHON"
	// EnvNodeModules is a node_modules directory holding the npm packages
	// pg, mysql2 and better-sqlite3 (version 12 on Node.js 20), such as
	// the one `npm install --prefix DIR pg mysql2 better-sqlite3@12` makes
	// in DIR.
	EnvNodeModules = "COURIER_TEST_NODE_MODULES"
)

// Python returns the path of the Python interpreter EnvPython names,
// skipping the test when it is unset (failing it when services are
// required).
func Python(t testing.TB) string {
	t.Helper()
	py := Need(t, EnvPython)
	if _, err := exec.LookPath(py); err != nil {
		t.Fatalf("%s=%s: %v", EnvPython, py, err)
	}
	return py
}

// Node returns the path of node and the node_modules directory
// EnvNodeModules names, skipping the test when it is unset (failing it
// when services are required). Run a script with NODE_PATH set to the
// directory (see NodeEnv) so that it can require the drivers.
func Node(t testing.TB) (node, modules string) {
	t.Helper()
	modules = Need(t, EnvNodeModules)
	for _, pkg := range []string{"pg", "mysql2", "better-sqlite3"} {
		if _, err := os.Stat(filepath.Join(modules, pkg, "package.json")); err != nil {
			t.Fatalf("%s=%s holds no npm package %s: npm install --prefix DIR pg mysql2 better-sqlite3@12 and name DIR/node_modules", EnvNodeModules, modules, pkg)
		}
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("%s is set but there is no node on the PATH: %v", EnvNodeModules, err)
	}
	return node, modules
}

// NodeEnv returns the process environment with NODE_PATH set to modules,
// for running a script that requires the packages installed there.
func NodeEnv(modules string) []string {
	return append(os.Environ(), "NODE_PATH="+modules)
}

// LibpqURL returns the URL of the test's schema in the form libpq and the
// drivers of other languages (psycopg, pg) read, and Courier's commands
// too: the server's URL with the schema as the session's search_path in
// the startup options (options=-csearch_path=SCHEMA), which pgx sends as
// well.
func (p *PG) LibpqURL() string {
	u, err := url.Parse(p.URL)
	if err != nil {
		panic(fmt.Sprintf("testenv: a PG's URL does not parse: %v", err)) // Postgres made it
	}
	q := u.Query()
	q.Del("search_path")
	q.Set("options", "-csearch_path="+p.Schema) // no space: libpq does not read + as one
	u.RawQuery = q.Encode()
	return u.String()
}

// PlainURL returns the test database's mysql:// URL without the Go
// driver's parameters: mysql://user[:password]@host:port/database, the
// form PyMySQL, MySQLdb and mysql2 take (and Courier's commands).
func (m *MySQLDB) PlainURL() string {
	u, err := url.Parse(m.URL)
	if err != nil {
		panic(fmt.Sprintf("testenv: a MySQLDB's URL does not parse: %v", err)) // MySQL made it
	}
	u.RawQuery = ""
	return u.String()
}
