package embedded_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier/broker/nats/embedded"
)

// A store directory that cannot be created fails Start at once, naming it.
func TestStartUnusableDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	srv, err := embedded.Start(embedded.Config{Dir: filepath.Join(file, "nats")})
	if err == nil {
		srv.Shutdown()
		t.Fatal("Start succeeded with a directory under a file")
	}
	if !strings.Contains(err.Error(), "Config.Dir") || !strings.Contains(err.Error(), "file/nats") || time.Since(start) > 5*time.Second {
		t.Fatalf("Start: %v after %s; want an error naming Config.Dir at once", err, time.Since(start))
	}
}

// A second server on a store directory another one has is refused, with
// the first's pid and URL; once the first is shut down the directory is
// free again.
func TestStartRefusesDirInUse(t *testing.T) {
	dir := t.TempDir()
	first, err := embedded.Start(embedded.Config{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	second, err := embedded.Start(embedded.Config{Dir: dir, NoSync: true})
	var inUse *embedded.DirInUseError
	if !errors.As(err, &inUse) {
		if second != nil {
			second.Shutdown()
		}
		first.Shutdown()
		t.Fatalf("second Start on %s: %v; want a *DirInUseError (two servers on one store lose what each acknowledged)", dir, err)
	}
	if inUse.PID != os.Getpid() || inUse.URL != first.ClientURL() || inUse.Dir != dir ||
		!strings.Contains(err.Error(), first.ClientURL()) || !strings.Contains(err.Error(), strconv.Itoa(os.Getpid())) {
		t.Errorf("DirInUseError %+v (%q); want pid %d and URL %s", inUse, err, os.Getpid(), first.ClientURL())
	}
	first.Shutdown()
	first.Shutdown() // again: nothing
	again, err := embedded.Start(embedded.Config{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatalf("Start after the first server's shutdown: %v", err)
	}
	again.Shutdown()
}
