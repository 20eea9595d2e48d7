//go:build race

package inbox_test

// raceEnabled says whether the race detector is on. It slows SQLite's
// pure-Go engine (C translated to Go, every memory access instrumented)
// about tenfold, and the heaviest test scales down on SQLite to match.
const raceEnabled = true
