package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/courier-go/courier/internal/testenv"
)

// courier demo never deletes what it did not make: a --data-dir (or
// COURIER_DEMO_DATA_DIR) that holds files of its own is refused, with
// the flag and the fix; a directory the demo made is reused, and only the
// demo's own files in it are replaced.
func TestDemoDataDirKeepsOthersFiles(t *testing.T) {
	dir := t.TempDir()
	theirs := filepath.Join(dir, "theirs")
	testenv.Must(t, os.MkdirAll(filepath.Join(theirs, "sub"), 0o755), "mkdir")
	testenv.Must(t, os.WriteFile(filepath.Join(theirs, "important.txt"), []byte("keep me"), 0o644), "write")
	file := filepath.Join(dir, "a-file")
	testenv.Must(t, os.WriteFile(file, []byte("keep me too"), 0o644), "write")

	for _, c := range []struct {
		args []string
		env  string
		want []string
	}{
		{[]string{"--data-dir", theirs}, "", []string{"--data-dir", theirs, "important.txt", "did not create", "new or empty directory"}},
		{[]string{"--data-dir", theirs, "--keep"}, "", []string{"--data-dir", "did not create"}},
		{nil, theirs, []string{"COURIER_DEMO_DATA_DIR", "did not create"}},
		{[]string{"--data-dir", file}, "", []string{"--data-dir", "not a directory"}},
	} {
		if c.env != "" {
			t.Setenv("COURIER_DEMO_DATA_DIR", c.env)
		}
		code, _, errOut := runCLI(t, append([]string{"demo", "--orders", "5", "--crash", "none"}, c.args...)...)
		os.Unsetenv("COURIER_DEMO_DATA_DIR")
		for _, w := range c.want {
			if code != 1 || !strings.Contains(errOut, w) {
				t.Errorf("demo %v (COURIER_DEMO_DATA_DIR=%q): exit %d, %q; want exit 1 and an error with %q", c.args, c.env, code, errOut, w)
			}
		}
		if b, err := os.ReadFile(filepath.Join(theirs, "important.txt")); err != nil || string(b) != "keep me" {
			t.Fatalf("demo %v deleted or changed important.txt: %q, %v", c.args, b, err)
		}
		if left, _ := os.ReadDir(theirs); len(left) != 2 {
			t.Fatalf("demo %v changed the directory it refused: %v", c.args, left)
		}
		if b, err := os.ReadFile(file); err != nil || string(b) != "keep me too" {
			t.Fatalf("demo %v deleted or changed a file named as --data-dir: %q, %v", c.args, b, err)
		}
	}

	// A new directory is the demo's: a second run replaces its files and
	// leaves what was put next to them.
	mine := filepath.Join(dir, "mine")
	for i := range 2 {
		code, out, errOut := runCLI(t, "demo", "--orders", "5", "--crash", "none", "--data-dir", mine)
		if code != 0 || !strings.Contains(out, "All 7 invariants hold") {
			t.Fatalf("demo run %d in a directory of its own: exit %d\n%s\n%s", i, code, out, errOut)
		}
		if i == 0 {
			testenv.Must(t, os.WriteFile(filepath.Join(mine, "notes.txt"), []byte("mine"), 0o644), "write")
		}
	}
	if b, err := os.ReadFile(filepath.Join(mine, "notes.txt")); err != nil || string(b) != "mine" {
		t.Fatalf("the demo deleted a file it did not make from its own directory: %q, %v", b, err)
	}
	log, err := os.ReadFile(filepath.Join(mine, "demo.log"))
	testenv.Must(t, err, "read the log")
	if strings.Count(string(log), "orders API listening") != 1 {
		t.Errorf("the second run did not start afresh: its log holds the first's too")
	}
}
