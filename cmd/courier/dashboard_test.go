package main

import (
	"bufio"
	"context"
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

	cmd := exec.Command(os.Args[0], "dashboard", "--addr", "0.0.0.0:0", "--database-url", "sqlite://"+path)
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
