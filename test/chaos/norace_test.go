//go:build !race

package chaos

// raceEnabled says whether this test binary has the race detector; the
// courier binary the transport runs build gets it too.
const raceEnabled = false
