package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/courier-go/courier/failgroup"
	"github.com/courier-go/courier/internal/escape"
	"github.com/courier-go/courier/store"
)

// dlqExportCmd writes the selected dead letters as JSON Lines, whole: to
// keep them before a discard, to hand them to another tool, to replay them
// elsewhere. It changes nothing in the database.
type dlqExportCmd struct {
	dlqSelect
	Out string `help:"Write to this file instead of standard output; it must not exist (it is created, readable by its owner only)." env:"COURIER_DLQ_OUT"`
}

// exportedRelay and exportedParked are the lines of an export: a dead
// letter's whole record (its payload in base64) with its ref and side.
type exportedRelay struct {
	Ref  string `json:"ref"`
	Side string `json:"side"`
	store.DeadLetter
}

type exportedParked struct {
	Ref  string `json:"ref"`
	Side string `json:"side"`
	store.Parked
}

func (c *dlqExportCmd) Run(e *env) error {
	if err := c.check("export"); err != nil {
		return err
	}
	if c.Out != "" {
		// Fail before reading anything; the open below is what makes
		// sure no file is overwritten.
		if _, err := os.Lstat(c.Out); err == nil {
			return outExists(c.Out)
		}
	}
	a, done, err := c.admin(e)
	if err != nil {
		return err
	}
	defer done()
	letters, err := c.pick(e, a)
	if err != nil {
		return err
	}
	if c.Out == "" {
		if len(letters) == 0 {
			fmt.Fprintln(e.stderr, "no dead letters match")
			return nil
		}
		_, err := writeLetters(e, a, e.stdout, letters)
		return err
	}
	n, err := writeExport(e, a, c.Out, letters)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "%d dead letter(s) written to %s\n", n, escape.Line(c.Out))
	return nil
}

// writeExport writes letters to a new file at path, mode 0600, and
// returns how many it wrote: it refuses a path that exists, and removes
// what it created when it fails.
func writeExport(e *env, a store.Admin, path string, letters []letter) (int, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return 0, outExists(path)
	}
	if err != nil {
		return 0, fmt.Errorf("--out: %w", err)
	}
	n, err := writeLetters(e, a, f, letters)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return 0, fmt.Errorf("--out %s: %w (the file is removed)", path, err)
	}
	return n, nil
}

func outExists(path string) error {
	return fmt.Errorf("--out %s exists: an export never overwrites a file; choose another path", path)
}

// writeLetters writes one JSON line per letter, each read whole when it
// is written (one at a time, however many there are), with the characters
// a terminal would act on escaped as \u escapes (escape.JSON): the lines
// decode to the records as stored. A letter gone since it was selected
// (replayed or discarded meanwhile) is left out, with a note on
// e.stderr. It returns how many it wrote.
func writeLetters(e *env, a store.Admin, w io.Writer, letters []letter) (int, error) {
	bw := bufio.NewWriter(w)
	n := 0
	for _, l := range letters {
		var v any
		var err error
		if l.relay() {
			var d store.DeadLetter
			d, err = a.DeadLetter(e.ctx, l.id)
			v = exportedRelay{Ref: l.ref, Side: failgroup.Relay, DeadLetter: d}
		} else {
			var p store.Parked
			p, err = a.ParkedMessage(e.ctx, l.id)
			v = exportedParked{Ref: l.ref, Side: failgroup.Consumer, Parked: p}
		}
		if errors.Is(err, store.ErrNotFound) {
			fmt.Fprintf(e.stderr, "note: %s is gone since it was selected (replayed or discarded meanwhile)\n", l.ref)
			continue
		}
		if err != nil {
			return n, fmt.Errorf("%s: %w", l.ref, err)
		}
		b, err := json.Marshal(v)
		if err != nil {
			return n, fmt.Errorf("%s: %w", l.ref, err)
		}
		if _, err := bw.Write(append(escape.JSON(b), '\n')); err != nil {
			return n, err
		}
		n++
	}
	return n, bw.Flush()
}
