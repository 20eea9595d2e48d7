package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat times:
// 100 on every mainstream Linux.
const clockTicks = 100

// procCPU returns a process's user+sys CPU time from /proc/<pid>/stat.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	// After the name: state is field 3, utime field 14, stime field 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// findProcess returns the pid of the only process whose command name is
// comm, or 0.
func findProcess(comm string) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	found := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/comm")
		if err != nil || strings.TrimSpace(string(b)) != comm {
			continue
		}
		if found != 0 {
			return 0 // ambiguous
		}
		found = pid
	}
	return found
}

// cpuSnapshot maps pids to their CPU time at one moment.
type cpuSnapshot map[int]time.Duration

// backendsCPU reads the CPU time of the PostgreSQL backends serving
// application appName (found in pg_stat_activity). Backends must run on this
// machine; an unreadable /proc entry is skipped.
func backendsCPU(ctx context.Context, admin *pgxpool.Pool, appName string) (cpuSnapshot, error) {
	rows, err := admin.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1", appName)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	snap := cpuSnapshot{}
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			return nil, err
		}
		if d, err := procCPU(pid); err == nil {
			snap[pid] = d
		}
	}
	return snap, rows.Err()
}

// cpuDelta is the CPU the processes of end used since start; a process not
// in start counts from zero.
func cpuDelta(start, end cpuSnapshot) time.Duration {
	var d time.Duration
	for pid, t := range end {
		d += t - start[pid]
	}
	return d
}

// machineCPU returns the time all CPUs of the machine spent busy and in
// all since boot, from the first line of /proc/stat (every process, this
// machine's other work included): busy is everything but idle and iowait.
func machineCPU() (busy, total time.Duration, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("malformed /proc/stat")
	}
	// user nice system idle iowait irq softirq steal (guest time is
	// counted in user already).
	var ticks [8]int64
	for i := range ticks {
		if i+1 >= len(f) {
			break
		}
		if ticks[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("malformed /proc/stat")
		}
	}
	var all int64
	for _, t := range ticks {
		all += t
	}
	idle := ticks[3] + ticks[4]
	tick := time.Second / clockTicks
	return time.Duration(all-idle) * tick, time.Duration(all) * tick, nil
}

// findOldestProcess returns the pid of the process whose command name is
// comm that started first, or 0: the server among short-lived tools of the
// same name (RabbitMQ's command-line tools run beam.smp too).
func findOldestProcess(comm string) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	found, first := 0, int64(-1)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/comm")
		if err != nil || strings.TrimSpace(string(b)) != comm {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(st)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 20 {
			continue
		}
		// After the name: starttime is field 22, the 20th.
		start, err := strconv.ParseInt(f[19], 10, 64)
		if err == nil && (first < 0 || start < first) {
			found, first = pid, start
		}
	}
	return found
}
