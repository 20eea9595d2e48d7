package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// EnvCourier names a courier binary for the tests that run the courier
// command as processes of their own, instead of building one.
const EnvCourier = "COURIER_CHAOS_COURIER"

// built is the courier binary built for this test process.
var built struct {
	once      sync.Once
	dir, path string
	err       error
}

// CourierBinary returns the path of the courier command: the one
// EnvCourier names, or one built from this module once per test process,
// with the race detector when this test binary has it (as the README's
// test command builds: without its pointer checks in the SQLite driver).
// RemoveCourierBinary deletes it.
func CourierBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(EnvCourier); p != "" {
		return p
	}
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "courier-bin-"); built.err != nil {
			return
		}
		built.path = filepath.Join(built.dir, "courier")
		args := []string{"build", "-o", built.path}
		if Race {
			args = append(args, "-race", "-gcflags=modernc.org/...=-d=checkptr=0")
		}
		args = append(args, "github.com/courier-go/courier/cmd/courier")
		start := time.Now()
		out, err := exec.Command("go", args...).CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			return
		}
		t.Logf("built the courier command in %s", time.Since(start).Round(100*time.Millisecond))
	})
	if built.err != nil {
		t.Fatalf("build the courier command (or set %s to the path of one): %v", EnvCourier, built.err)
	}
	return built.path
}

// RemoveCourierBinary deletes the binary CourierBinary built, if any: call
// it from TestMain once the tests have run.
func RemoveCourierBinary() {
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
}
