// Package replayguard runs a guarded replay of dead letters, as courier
// dlq replay and the dashboard do: a canary first (replay N, wait for
// their outcome, go on only if none failed again), a rate (replays per
// second), a stop when a replayed letter fails again, progress while it
// runs, and the run recorded in the database (store.ReplayRuns) as it
// goes, so that the CLI and every dashboard see it.
//
// It also holds the rule that refuses a consumer-side replay of a letter
// parked longer ago than the inbox's marker retention (see [Stale]): the
// message's inbox marker may be gone, so it may be applied twice.
//
// The caller selects the letters, replays one (store.Admin's
// ReplayDeadLetter or RequestReplay) and tells a replay's outcome; the
// package decides when and whether.
package replayguard
