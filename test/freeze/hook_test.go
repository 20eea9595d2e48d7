package freeze

import (
	"context"
	"database/sql/driver"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/jackc/pgx/v5"
)

// stopOnce freezes this process (SIGSTOP) the first time a statement
// containing pattern is about to run, or, for PostgreSQL batches, has had
// its result read.
type stopOnce struct {
	pattern string
	done    atomic.Bool
}

func (s *stopOnce) see(query string) {
	if s.pattern != "" && strings.Contains(query, s.pattern) && s.done.CompareAndSwap(false, true) {
		stopHere()
	}
}

// stopHere stops this process before the calling goroutine goes on. The
// SIGSTOP goes to the calling thread, which takes the stop on its way back
// from the kernel. Sent to the process, it may be taken by another thread,
// which on a busy machine can wait for a core while this one runs on into
// the next statements (and, on SQLite, takes the write lock).
func stopHere() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = syscall.Tgkill(syscall.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
}

// pgx tracer: statements before they are sent, batch queries after their
// result was read (the claim has committed by then, or is committing).
func (s *stopOnce) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.see(d.SQL)
	return ctx
}
func (s *stopOnce) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (s *stopOnce) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (s *stopOnce) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	s.see(d.SQL)
}
func (s *stopOnce) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// hookConnector wraps a database/sql driver so that every statement passes
// by stop first.
type hookConnector struct {
	base driver.Connector
	stop *stopOnce
}

func (c hookConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.base.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &hookConn{Conn: conn, stop: c.stop}, nil
}

func (c hookConnector) Driver() driver.Driver { return c.base.Driver() }

// dsnConnector opens connections with a driver's Open.
type dsnConnector struct {
	dsn string
	drv driver.Driver
}

func (c dsnConnector) Connect(context.Context) (driver.Conn, error) { return c.drv.Open(c.dsn) }
func (c dsnConnector) Driver() driver.Driver                        { return c.drv }

type hookConn struct {
	driver.Conn
	stop *stopOnce
}

func (c *hookConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	c.stop.see(q)
	if qc, ok := c.Conn.(driver.QueryerContext); ok {
		return qc.QueryContext(ctx, q, args)
	}
	return nil, driver.ErrSkip
}

func (c *hookConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	c.stop.see(q)
	if ec, ok := c.Conn.(driver.ExecerContext); ok {
		return ec.ExecContext(ctx, q, args)
	}
	return nil, driver.ErrSkip
}

func (c *hookConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	c.stop.see(q)
	if pc, ok := c.Conn.(driver.ConnPrepareContext); ok {
		return pc.PrepareContext(ctx, q)
	}
	return c.Conn.Prepare(q)
}

func (c *hookConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if bc, ok := c.Conn.(driver.ConnBeginTx); ok {
		return bc.BeginTx(ctx, opts)
	}
	return nil, errors.New("freeze: the driver has no BeginTx")
}

func (c *hookConn) CheckNamedValue(nv *driver.NamedValue) error {
	if nc, ok := c.Conn.(driver.NamedValueChecker); ok {
		return nc.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func (c *hookConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *hookConn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *hookConn) Ping(ctx context.Context) error {
	if p, ok := c.Conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}
