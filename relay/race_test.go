//go:build race

package relay_test

// raceEnabled says whether the race detector is on. It slows SQLite's
// pure-Go engine (C translated to Go, every memory access instrumented)
// about tenfold: the relay tests give SQLite longer leases and the heaviest
// test fewer messages to match.
const raceEnabled = true
