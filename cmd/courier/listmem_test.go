package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store/mysql"
	"github.com/courier-go/courier/store/postgres"
	"github.com/courier-go/courier/store/sqlite"
)

// bulkyParked is how many parked deliveries BenchmarkListMemory's
// databases hold, and bulkyBytes how large the bulky text of each is.
const (
	bulkyParked = 100
	bulkyBytes  = 2_000_000
)

// bulkyDatabase is a migrated database of one dialect holding bulkyParked
// parked deliveries whose headers (one header bulkyBytes long besides the
// type) or reason (bulkyBytes long) are bulky, as bulk says ("headers",
// "reason" or "none"). The dialect makes the texts itself, so that the
// seed sends no bulk.
type bulkyDatabase struct {
	name string
	open func(tb testing.TB, bulk string) string // returns the database's URL
}

// bulkySeed returns the statement that parks bulkyParked deliveries, given
// the dialect's SQL of a text of bulkyBytes x's, of a row number from 1 to
// bulkyParked (rows is the FROM clause that yields it as n), of now, and
// what makes a text the headers' type (asJSON, such as "::jsonb").
func bulkySeed(bulk, xs, rows, now, asJSON string) string {
	headers, reason := `'{"Courier-Type":["ChargeRequested"]}'`, "'failed'"
	switch bulk {
	case "headers":
		headers = `concat('{"Courier-Type":["ChargeRequested"],"X-Bulk":["', ` + xs + `, '"]}')` + asJSON
	case "reason":
		reason = xs
	}
	return `INSERT INTO courier_inbox_dead_letters (consumer, message_id, subject, headers, payload, reason, last_error, attempts, parked_at)
SELECT 'billing', concat('01939f3a-0000-7000-8000-', n), 'courier.payments', ` + headers + `, 'x', ` + reason + `, concat('card ', n, ' declined'), 5, ` + now + `
FROM ` + rows
}

var bulkyDatabases = []bulkyDatabase{
	{"sqlite", func(tb testing.TB, bulk string) string {
		path := filepath.Join(tb.TempDir(), "bulky.db")
		db, err := sqlite.Open(path)
		testenv.Must(tb, err, "open")
		defer db.Close()
		_, err = sqlite.Migrate(context.Background(), db)
		testenv.Must(tb, err, "migrate")
		seed := bulkySeed(bulk, fmt.Sprintf("replace(hex(zeroblob(%d)), '0', 'x')", bulkyBytes/2),
			fmt.Sprintf("(WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < %d) SELECT n FROM r)", bulkyParked),
			"CAST(unixepoch('subsec') * 1000000 AS INTEGER)", "")
		_, err = db.Exec(seed)
		testenv.Must(tb, err, "seed")
		return "sqlite://" + path
	}},
	{"postgres", func(tb testing.TB, bulk string) string {
		pg := testenv.Postgres(tb, testenv.Migrate(postgres.NewDriver))
		db := stdlib.OpenDBFromPool(pg.Pool)
		defer db.Close()
		seed := bulkySeed(bulk, fmt.Sprintf("repeat('x', %d)", bulkyBytes), fmt.Sprintf("generate_series(1, %d) AS n", bulkyParked), "now()", "::jsonb")
		_, err := db.Exec(seed)
		testenv.Must(tb, err, "seed")
		return pg.URL
	}},
	{"mysql", func(tb testing.TB, bulk string) string {
		if bulk == "reason" {
			tb.Skip("MySQL's reason column holds 32 characters")
		}
		my := testenv.MySQL(tb, testenv.Migrate(mysql.NewDriver))
		seed := bulkySeed(bulk, fmt.Sprintf("REPEAT('x', %d)", bulkyBytes),
			fmt.Sprintf("(WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < %d) SELECT n FROM r) AS r", bulkyParked),
			"NOW(6)", "")
		_, err := my.DB.Exec(seed)
		testenv.Must(tb, err, "seed")
		return mysqlURL(tb, my.DSN)
	}},
}

// BenchmarkListMemory measures the peak resident memory of courier
// dashboard serving /parked and /failures, and of courier dlq list, dlq
// groups, dlq replay --all --dry-run and dlq export --all, on databases of each dialect holding 100 parked
// deliveries with 2 MB headers, with 2 MB reasons, or neither. Run it
// without the race detector, once:
//
//	go test -run '^$' -bench ListMemory -benchtime 1x ./cmd/courier
//
// It reports peak-MB, the process's peak resident memory (VmHWM, or the
// rusage of a command that ran to its end), and for the dashboard idle-MB,
// its peak before the request.
func BenchmarkListMemory(b *testing.B) {
	for _, d := range bulkyDatabases {
		for _, bulk := range []string{"none", "headers", "reason"} {
			b.Run(d.name+"/"+bulk, func(b *testing.B) {
				url := d.open(b, bulk)
				for _, page := range []string{"/parked", "/failures"} {
					b.Run("dashboard"+page, func(b *testing.B) {
						for b.Loop() {
							idle, peak := dashboardPeak(b, url, page)
							b.ReportMetric(float64(idle)/1e6, "idle-MB")
							b.ReportMetric(float64(peak)/1e6, "peak-MB")
						}
					})
				}
				for _, args := range [][]string{{"list"}, {"groups"}, {"replay", "--all", "--dry-run"}, {"export", "--all"}} {
					b.Run("dlq-"+args[0], func(b *testing.B) {
						for b.Loop() {
							b.ReportMetric(float64(commandPeak(b, append(append([]string{"dlq"}, args...), "--database-url", url)...))/1e6, "peak-MB")
						}
					})
				}
			})
		}
	}
}

// commandPeak runs the courier command with args to its end and returns
// its peak resident memory in bytes.
func commandPeak(tb testing.TB, args ...string) int64 {
	tb.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "COURIER_TEST_BE_CLI=1")
	cmd.Stdout = io.Discard
	var errOut strings.Builder
	cmd.Stderr = &errOut
	if err := cmd.Run(); err != nil {
		tb.Fatalf("courier %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss * 1024 // Linux counts KiB
}

// dashboardPeak starts courier dashboard on url, reads its peak resident
// memory, gets page and reads it again; both in bytes.
func dashboardPeak(tb testing.TB, url, page string) (idle, peak int64) {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "dashboard", "--addr", "127.0.0.1:0", "--database-url", url)
	cmd.Env = append(os.Environ(), "COURIER_TEST_BE_CLI=1")
	stdout, err := cmd.StdoutPipe()
	testenv.Must(tb, err, "stdout")
	var logs testenv.Buffer
	cmd.Stderr = &logs
	testenv.Must(tb, cmd.Start(), "start dashboard")
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	testenv.Must(tb, err, "read the address line")
	m := regexp.MustCompile(`http://\S+:(\d+)/`).FindStringSubmatch(line)
	if m == nil {
		tb.Fatalf("no address in %q\n%s", line, logs.String())
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	idle = highWater(tb, cmd.Process.Pid)
	resp, err := http.Get("http://127.0.0.1:" + m[1] + page)
	testenv.Must(tb, err, "get "+page)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("%s: %d\n%s\n%s", page, resp.StatusCode, body, logs.String())
	}
	return idle, highWater(tb, cmd.Process.Pid)
}

// highWater returns the peak resident memory of process pid, in bytes.
func highWater(tb testing.TB, pid int) int64 {
	tb.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	testenv.Must(tb, err, "read the process's status")
	m := regexp.MustCompile(`(?m)^VmHWM:\s+(\d+) kB$`).FindSubmatch(status)
	if m == nil {
		tb.Fatalf("no VmHWM in\n%s", status)
	}
	kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return kb * 1024
}
