package testenv

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// EnvNode is the counter under which tests that need Node.js and npm are
// skipped (see [NPMPackage]); it names no variable to set.
const EnvNode = "node and npm"

// NPMPackage installs the npm package spec (such as
// "standardwebhooks@1.1.1") into a new temporary directory with npm and
// returns the path of node and that directory, where a script run with the
// directory as its working directory can require the package. Nothing is
// cached between tests. When node or npm is missing or the registry cannot
// be reached, the test is skipped (counted under EnvNode), unless
// COURIER_TEST_REQUIRE_SERVICES=1, which fails it instead.
func NPMPackage(t testing.TB, spec string) (node, dir string) {
	t.Helper()
	missing := func(why string) {
		t.Helper()
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%s, and %s=1: install Node.js and npm (apt-get install -y nodejs npm) and let npm reach its registry", why, EnvRequire)
		}
		skipped.add(EnvNode)
		t.Skipf("needs Node.js and npm: %s", why)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("no node on the PATH")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		missing("no npm on the PATH")
	}
	dir = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "install", "--prefix", dir, "--no-audit", "--no-fund", "--no-save", "--loglevel=error", spec)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "npm_config_update_notifier=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		missing("npm install " + spec + " failed (" + err.Error() + "): " + strings.TrimSpace(string(out)))
	}
	return node, dir
}
