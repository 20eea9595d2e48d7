//go:build !race

package relay_test

// raceEnabled says whether the race detector is on (see race_test.go).
const raceEnabled = false
