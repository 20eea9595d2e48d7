package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// EnvChromium is the path of the Chromium (or Chrome) binary the browser
// tests drive. Unset, they look for chromium on the PATH (Debian's package
// chromium installs it: apt-get install -y chromium).
const EnvChromium = "COURIER_TEST_CHROMIUM"

// Chromium returns the path of the browser the dashboard's browser tests
// drive: COURIER_TEST_CHROMIUM, else chromium, chromium-browser or
// google-chrome on the PATH. When there is none the test is skipped (and
// counted under COURIER_TEST_CHROMIUM), unless COURIER_TEST_REQUIRE_SERVICES=1,
// which fails it instead.
func Chromium(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(EnvChromium); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("no chromium on the PATH and %s is not set, and %s=1: install it (apt-get install -y chromium)", EnvChromium, EnvRequire)
	}
	skipped.add(EnvChromium)
	t.Skipf("needs a browser: install chromium (apt-get install -y chromium) or set %s", EnvChromium)
	return ""
}
