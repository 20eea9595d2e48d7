//go:build !race

package testenv

// Race says whether this binary has the race detector.
const Race = false
