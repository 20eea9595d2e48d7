package chaos

import (
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
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

// start starts a relay process.
func (p *relayProcs) start() *exec.Cmd {
	cmd := exec.Command(p.cmdline[0], p.cmdline[1:]...)
	cmd.Stderr = p.logs
	testenv.Must(p.t, cmd.Start(), "start a relay")
	p.runs.Add(1)
	return cmd
}

// liveAndDie keeps one relay running, SIGKILLing it 0.3–3s after it
// started and starting another, until ctx ends; it starts with cmd when
// not nil.
func (p *relayProcs) liveAndDie(ctx context.Context, cmd *exec.Cmd) {
	for {
		if cmd == nil {
			cmd = p.start()
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(300+rand.IntN(2700)) * time.Millisecond):
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if ctx.Err() != nil {
			return
		}
		p.kills.Add(1)
		cmd = nil
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
