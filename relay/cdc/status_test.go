package cdc_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/relay/cdc"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/postgres"
)

// slotStatus returns the test's slot as Status reports it, and whether it
// is there.
func (e *env) slotStatus() (store.ReplicationSlot, bool) {
	e.t.Helper()
	st, err := e.d.Operations().Status(context.Background())
	testenv.Must(e.t, err, "status")
	for _, s := range st.Slots {
		if s.Name == e.slot {
			return s, true
		}
	}
	return store.ReplicationSlot{}, false
}

// Status reports the slot: without a reader, inactive with a lag that grows
// with every transaction written and no lag in seconds; once a relay reads
// it, active with its walsender's pid and, while messages flow, the lag in
// seconds. Its Ready says it reads the slot, and a second relay's that it
// waits as a standby.
func TestStatusReportsSlotLag(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, ok := e.slotStatus(); ok {
		t.Fatalf("slot %s is reported before it exists", e.slot)
	}
	// The publication first: pgoutput decodes the log with the catalog
	// of its time, and a publication made after the slot is not found.
	testenv.Must(t, postgres.NewDriver(e.pg.Pool).CDC().Setup(ctx, e.slot), "publication")
	_, err := e.pg.Pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, e.slot)
	testenv.Must(t, err, "create slot")

	before, ok := e.slotStatus()
	if !ok {
		t.Fatalf("slot %s is not in Status", e.slot)
	}
	if before.Active || before.ActivePID != 0 || before.Plugin != "pgoutput" || before.WALStatus != "reserved" || before.LagSeconds != nil {
		t.Fatalf("new slot: %+v", before)
	}
	for i := range 20 {
		e.write(msg(fmt.Sprint(i%4), fmt.Sprint(i)))
	}
	after, _ := e.slotStatus()
	if after.LagBytes <= before.LagBytes || after.LagBytes < 20*100 {
		t.Fatalf("lag %d bytes after 20 transactions, %d before: it should grow", after.LagBytes, before.LagBytes)
	}
	if after.RetainedBytes < after.LagBytes {
		t.Fatalf("retained %d bytes, less than the lag %d", after.RetainedBytes, after.LagBytes)
	}
	t.Logf("unread slot: lag %d bytes, retained %d", after.LagBytes, after.RetainedBytes)

	r, stop := e.start(e.pub, e.config())
	// Messages keep flowing, so that PostgreSQL measures the reader's lag.
	writing, wrote := make(chan struct{}), make(chan struct{})
	stopWriting := sync.OnceFunc(func() { close(writing); <-wrote })
	t.Cleanup(stopWriting)
	go func() {
		defer close(wrote)
		for i := 0; ; i++ {
			select {
			case <-writing:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if err := e.d.InTx(ctx, func(tx pgx.Tx) error { return e.w.Write(ctx, tx, msg(fmt.Sprint(i%4), fmt.Sprint("flow", i))) }); err != nil {
				t.Errorf("write: %v", err)
				return
			}
		}
	}()
	var read store.ReplicationSlot
	e.eventually(func() bool {
		read, _ = e.slotStatus()
		return read.Active && read.ActivePID != 0 && read.LagSeconds != nil
	}, "the slot read by a relay is active with a lag in seconds: %+v", &read)
	t.Logf("read slot: pid %d, lag %d bytes, %.3fs", read.ActivePID, read.LagBytes, *read.LagSeconds)
	if *read.LagSeconds < 0 || *read.LagSeconds > 30 {
		t.Fatalf("lag of %fs", *read.LagSeconds)
	}
	status, err := r.Ready(ctx)
	if err != nil || status == "" {
		t.Fatalf("Ready of the reading relay: %q, %v", status, err)
	}
	t.Logf("reader: %s", status)

	standby, _ := e.start(e.pub, e.config())
	status, err = standby.Ready(ctx)
	if err != nil || !strings.HasPrefix(status, "standby:") {
		t.Fatalf("Ready of the standby: %q, %v", status, err)
	}
	t.Logf("standby: %s", status)
	stopWriting()
	stop()
	e.eventually(func() bool { return reads(standby) }, "the standby takes over")
}

// Ready fails while no relay reads the slot.
func TestReadyWithoutReader(t *testing.T) {
	e := newEnv(t)
	r, err := cdc.New(postgres.NewDriver(e.pg.Pool).CDC(), e.pub, e.config())
	testenv.Must(t, err, "new relay")
	if status, err := r.Ready(context.Background()); err == nil {
		t.Fatalf("Ready of a relay that does not run: %q", status)
	} else {
		t.Logf("no slot: %v", err)
	}
	_, err = e.pg.Pool.Exec(context.Background(), `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, e.slot)
	testenv.Must(t, err, "create slot")
	if status, err := r.Ready(context.Background()); err == nil {
		t.Fatalf("Ready of a relay that does not run, on a slot nobody reads: %q", status)
	} else {
		t.Logf("inactive slot: %v", err)
	}
}
