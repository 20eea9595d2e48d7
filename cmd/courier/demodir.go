package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/courier-go/courier/cmd/courier/internal/shop"
	"github.com/courier-go/courier/internal/dirlock"
)

// demoMark is the file courier demo writes into a data directory it makes
// its own: a directory holding it is the demo's, and the demo deletes from
// it only the files it writes there (demoFiles).
const demoMark = ".courier-demo"

// demoMarkText is demoMark's content, for a person who finds the file.
const demoMarkText = "This directory is courier demo's: each run without --keep deletes the files it wrote here before (demo.log, nats/, the services' .db files) and nothing else; .courier.lock keeps a second demo out while one runs.\n"

// demoFiles are the names courier demo writes into its data directory:
// the log, the embedded NATS server's directory, each service's SQLite
// file with its journal, write-ahead log and shared memory.
func demoFiles() []string {
	names := []string{"demo.log", "nats"}
	for _, s := range shop.Services {
		for _, ext := range []string{".db", ".db-journal", ".db-wal", ".db-shm"} {
			names = append(names, s+ext)
		}
	}
	return names
}

// prepareDataDir makes dir the demo's data directory: a new or empty
// directory is marked as the demo's; a directory marked already is the
// demo's, whose files of an earlier run are deleted unless keep. Anything
// else (a file, a directory holding others' files) is refused: the demo
// never deletes nor writes over what it did not make. The directory is
// then this process's until release (dirlock): a second demo on it is
// refused, rather than deleting the files of the run under way and
// writing the same SQLite files and stream. flag names where dir came
// from, for errors.
func prepareDataDir(dir string, keep bool, flag string) (release func(), err error) {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("%s %s: %w", flag, dir, err)
		}
		if err := markDataDir(dir, flag); err != nil {
			return nil, err
		}
	case err != nil:
		if fi, serr := os.Stat(dir); serr == nil && !fi.IsDir() {
			return nil, fmt.Errorf("%s %s is not a directory: name a new or empty directory, or leave %s out for a temporary one", flag, dir, flag)
		}
		return nil, fmt.Errorf("%s %s: %w", flag, dir, err)
	case len(entries) == 0:
		if err := markDataDir(dir, flag); err != nil {
			return nil, err
		}
	case !slices.ContainsFunc(entries, func(e fs.DirEntry) bool { return e.Name() == demoMark && e.Type().IsRegular() }):
		var names []string
		for _, e := range entries[:min(3, len(entries))] {
			names = append(names, e.Name())
		}
		if len(entries) > 3 {
			names = append(names, "…")
		}
		return nil, fmt.Errorf("%s %s holds files courier demo did not create (%s): name a new or empty directory, or leave %s out for a temporary one; the demo deletes only what it made",
			flag, dir, strings.Join(names, ", "), flag)
	}
	lock, err := dirlock.Acquire(dir)
	var held *dirlock.HeldError
	if errors.As(err, &held) {
		who := "another courier process"
		if held.Owner.PID != 0 {
			who = fmt.Sprintf("courier process %d", held.Owner.PID)
		}
		return nil, fmt.Errorf("%s %s is in use by %s (a demo under way): wait for it to end, or name another directory", flag, dir, who)
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, dir, err)
	}
	if keep {
		return lock.Release, nil
	}
	for _, name := range demoFiles() {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			lock.Release()
			return nil, fmt.Errorf("%s %s: delete the files of an earlier run: %w", flag, dir, err)
		}
	}
	return lock.Release, nil
}

func markDataDir(dir, flag string) error {
	if err := os.WriteFile(filepath.Join(dir, demoMark), []byte(demoMarkText), 0o644); err != nil {
		return fmt.Errorf("%s %s: %w", flag, dir, err)
	}
	return nil
}
