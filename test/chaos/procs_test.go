package chaos

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/courier-go/courier/internal/testenv"
)

// relayProcs starts `courier relay` processes of one command line, their
// standard error in one log file, and kills them in a loop.
type relayProcs struct {
	t       *testing.T
	cmdline []string
	logs    *os.File
	runs    atomic.Int64 // processes started
	kills   atomic.Int64 // processes SIGKILLed by liveAndDie
}

// newRelayProcs returns the processes of cmdline (the courier binary's
// arguments), logging to a file of the test's, whose last lines the test
// shows when it fails.
func newRelayProcs(t *testing.T, cmdline ...string) *relayProcs {
	logs, err := os.Create(filepath.Join(t.TempDir(), "relays.log"))
	testenv.Must(t, err, "log file")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last lines of the relays' log:\n%s", lastLines(logs.Name(), 40))
		}
		logs.Close()
	})
	return &relayProcs{t: t, cmdline: append([]string{testenv.CourierBinary(t)}, cmdline...), logs: logs}
}

// relayProc is a relay process.
type relayProc struct {
	*exec.Cmd
	// ready is closed once the relay logged that it is relaying (it
	// logs at level info or lower): connected, its store and broker
	// open, however long that took on a busy machine.
	ready chan struct{}
}

// start starts a relay process.
func (p *relayProcs) start() *relayProc {
	cmd := exec.Command(p.cmdline[0], p.cmdline[1:]...)
	ready := make(chan struct{})
	cmd.Stderr = &readyWriter{w: p.logs, ready: ready}
	testenv.Must(p.t, cmd.Start(), "start a relay")
	p.runs.Add(1)
	return &relayProc{Cmd: cmd, ready: ready}
}

// readyWriter passes what a relay logs on to w, and closes ready at the
// first line saying it is relaying.
type readyWriter struct {
	w     io.Writer
	ready chan struct{}
	seen  bool
	line  []byte // the part of a line written so far, while not seen
}

func (r *readyWriter) Write(b []byte) (int, error) {
	if !r.seen {
		r.line = append(r.line, b...)
		for {
			i := bytes.IndexByte(r.line, '\n')
			if i < 0 {
				break
			}
			if relaying.Match(r.line[:i]) {
				r.seen, r.line = true, nil
				close(r.ready)
				break
			}
			r.line = r.line[i+1:]
		}
	}
	return r.w.Write(b)
}

// relaying matches the line a relay logs once it runs (text or JSON).
var relaying = regexp.MustCompile(`msg="?relaying|"msg":"relaying`)

// liveAndDie keeps one relay running, SIGKILLing it 0.3–3s after it
// began relaying and starting another, until ctx ends; it starts with
// proc when not nil. A relay that exits or never gets that far is
// killed when ctx ends.
func (p *relayProcs) liveAndDie(ctx context.Context, proc *relayProc) {
	for {
		if proc == nil {
			proc = p.start()
		}
		select {
		case <-ctx.Done():
		case <-proc.ready:
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(300+rand.IntN(2700)) * time.Millisecond):
			}
		}
		cmd := proc.Cmd
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if ctx.Err() != nil {
			return
		}
		p.kills.Add(1)
		proc = nil
	}
}

// countWire counts every publish on the subjects under prefix, duplicates
// the stream drops included, until the test ends.
func countWire(t *testing.T, nc *natsgo.Conn, prefix string) *atomic.Int64 {
	var n atomic.Int64
	sub, err := nc.Subscribe(prefix+">", func(*natsgo.Msg) { n.Add(1) })
	testenv.Must(t, err, "subscribe")
	testenv.Must(t, sub.SetPendingLimits(-1, -1), "pending limits")
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return &n
}
