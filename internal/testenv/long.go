package testenv

import "flag"

// long is the -long flag every test binary that imports testenv takes.
var long = flag.Bool("long", false, "run the long version of the package's fault tests and sweeps (every duration, every shape, more repetitions); CI runs the short one")

// Long reports whether the test binary runs with -long: sweeps and fault
// tests then cover every point of their range, several times, where the
// default run (what CI runs) takes the points on both sides of each
// boundary once.
func Long() bool { return *long }
