package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store/sqlite"
)

func TestDashboardRefusesAnOpenAddressWithoutToken(t *testing.T) {
	t.Setenv("COURIER_DASHBOARD_TOKEN", "")
	os.Unsetenv("COURIER_DASHBOARD_TOKEN")
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		// The database is never opened: the address is refused first.
		code, _, stderr := runCLI(t, "dashboard", "--addr", addr, "--database-url", "sqlite:///no/such/file.db")
		if code != 1 || !strings.Contains(stderr, "--token") || !strings.Contains(stderr, "not a loopback address") {
			t.Errorf("dashboard --addr %s without --token: exit %d, %q; want exit 1 and an error naming --token", addr, code, stderr)
		}
	}
}

// A token too short to resist guessing is refused before the database is
// opened, with how to make a good one.
func TestDashboardTokenStrength(t *testing.T) {
	for _, args := range [][]string{
		{"dashboard", "--token", "a", "--database-url", "sqlite:///no/such/file.db"},
		{"relay", "--dashboard", "127.0.0.1:0", "--dashboard-token", "short", "--database-url", "sqlite:///no/such/file.db"},
	} {
		code, _, stderr := runCLI(t, args...)
		if code != 1 || !strings.Contains(stderr, "token") || !strings.Contains(stderr, "at least 16 bytes") || !strings.Contains(stderr, "openssl rand") {
			t.Errorf("%s: exit %d, %q; want exit 1 and an error naming the flag and the fix", strings.Join(args, " "), code, stderr)
		}
	}
}

// A name --allowed-host cannot take is refused before the database is
// opened.
func TestDashboardAllowedHostFlag(t *testing.T) {
	code, _, stderr := runCLI(t, "dashboard", "--allowed-host", "https://courier.example.com", "--database-url", "sqlite:///no/such/file.db")
	if code != 1 || !strings.Contains(stderr, "--allowed-host") || !strings.Contains(stderr, "not a host name") {
		t.Errorf("dashboard --allowed-host https://…: exit %d, %q; want exit 1 and an error naming --allowed-host", code, stderr)
	}
}

// TestDashboardServes runs courier dashboard as a process with a token on
// a SQLite database, logs in, lists the dead letters and stops it with
// SIGTERM.
func TestDashboardServes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "courier.db")
	db, err := sqlite.Open(path)
	testenv.Must(t, err, "open")
	_, err = sqlite.Migrate(context.Background(), db)
	testenv.Must(t, err, "migrate")
	db.Close()

	cmd := exec.Command(os.Args[0], "dashboard", "--addr", "0.0.0.0:0", "--database-url", "sqlite://"+path, "--allowed-host", "courier.example.com")
	cmd.Env = append(os.Environ(), "COURIER_TEST_BE_CLI=1", "COURIER_DASHBOARD_TOKEN=t0ken-for-the-test")
	stdout, err := cmd.StdoutPipe()
	testenv.Must(t, err, "stdout")
	var logs strings.Builder
	cmd.Stderr = &logs
	testenv.Must(t, cmd.Start(), "start dashboard")
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	testenv.Must(t, err, "read the address line")
	m := regexp.MustCompile(`http://\S+:(\d+)/`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no address in %q", line)
	}
	base := "http://127.0.0.1:" + m[1]
	go func() { _, _ = io.Copy(io.Discard, stdout) }()

	// Without the token: the login page.
	resp, err := http.Get(base + "/dead-letters")
	testenv.Must(t, err, "get")
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), "Log in") {
		t.Fatalf("without the token: %d\n%s", resp.StatusCode, page)
	}
	// With it.
	req, _ := http.NewRequest(http.MethodGet, base+"/dead-letters", nil)
	req.Header.Set("Authorization", "Bearer t0ken-for-the-test")
	resp, err = http.DefaultClient.Do(req)
	testenv.Must(t, err, "get with the token")
	page, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(page), "No dead letters") {
		t.Fatalf("with the token: %d\n%s", resp.StatusCode, page)
	}
	// Requests for another host are refused, even with the token; those
	// for a name --allowed-host gave are served.
	for host, want := range map[string]int{"evil.example:" + m[1]: http.StatusMisdirectedRequest, "courier.example.com": http.StatusOK} {
		req.Host = host
		resp, err = http.DefaultClient.Do(req)
		testenv.Must(t, err, "get with Host "+host)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("with Host %s: %d, want %d", host, resp.StatusCode, want)
		}
	}
	// A post with the bearer token acts; one without is refused.
	resp, err = http.PostForm(base+"/dead-letters/discard", url.Values{"id": {"1"}})
	testenv.Must(t, err, "post")
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a post without token nor CSRF token: %d", resp.StatusCode)
	}

	testenv.Must(t, cmd.Process.Signal(syscall.SIGTERM), "sigterm")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("dashboard exit after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("dashboard did not stop after SIGTERM\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "dashboard stopped") {
		t.Fatalf("no clean stop in the logs:\n%s", logs.String())
	}
}

// courier relay --dashboard serves the dashboard beside the relay, and
// refuses an open address without --dashboard-token before it creates
// anything.
func TestRelayDashboard(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("COURIER_RELAY_DASHBOARD_TOKEN", "")
	os.Unsetenv("COURIER_RELAY_DASHBOARD_TOKEN")
	code, _, stderr := runCLI(t, "relay", "--embedded-port", "0", "--dashboard", "0.0.0.0:0")
	if code != 1 || !strings.Contains(stderr, "--dashboard-token") {
		t.Fatalf("relay --dashboard 0.0.0.0:0 without a token: exit %d, %q; want exit 1 naming --dashboard-token", code, stderr)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("the refused relay created %s", left[0].Name())
	}

	cmd := exec.Command(os.Args[0], "relay", "--log-format", "json", "--embedded-port", "0", "--dashboard", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "COURIER_TEST_BE_CLI=1", "COURIER_DATABASE_URL=", "COURIER_BROKER_URL=")
	stderr2, err := cmd.StderrPipe()
	testenv.Must(t, err, "pipe")
	testenv.Must(t, cmd.Start(), "start relay")
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	var dashURL string
	relaying := false
	lines := bufio.NewScanner(stderr2)
	var logs strings.Builder
	for dashURL == "" || !relaying {
		if !lines.Scan() {
			t.Fatalf("relay exited before relaying and serving the dashboard:\n%s", logs.String())
		}
		logs.WriteString(lines.Text() + "\n")
		var rec map[string]any
		if err := json.Unmarshal(lines.Bytes(), &rec); err == nil && rec["msg"] == "dashboard serving" {
			dashURL = fmt.Sprint(rec["url"])
		}
		relaying = relaying || rec["msg"] == "relaying"
	}
	rest := make(chan string, 1)
	go func() {
		var b strings.Builder
		for lines.Scan() {
			b.WriteString(lines.Text() + "\n")
		}
		rest <- b.String()
	}()
	resp, err := http.Get(dashURL)
	testenv.Must(t, err, "get the overview")
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(page), `id="pending"`) {
		t.Fatalf("the relay's dashboard: %d\n%s", resp.StatusCode, page)
	}
	testenv.Must(t, cmd.Process.Signal(syscall.SIGTERM), "sigterm")
	logs.WriteString(<-rest)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("relay exit after SIGTERM: %v\n%s", err, logs.String())
	}
	if !strings.Contains(logs.String(), "dashboard stopped") {
		t.Fatalf("no dashboard stopped in the relay's logs:\n%s", logs.String())
	}
}
