package embedded_test

import (
	"os"
	"path/filepath"
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
