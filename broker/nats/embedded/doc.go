// Package embedded runs a NATS server with JetStream inside the current
// process: the broker of Courier's embedded default (no server to install)
// and of tests. Its store syncs every write to disk before acknowledging it.
//
// # One server per store directory
//
// A server owns its store directory (Config.Dir) alone. Two NATS servers
// started on one directory know nothing of each other: each keeps its own
// view of the stream in memory and rewrites the same files, each
// acknowledges what it stored, and when they stop and one starts again the
// stream holds what one of them wrote last, not both. Messages a relay
// published there and deleted from its outbox once acknowledged are gone,
// with no error anywhere. So [Start] takes an exclusive lock on the
// directory first (a file named .courier.lock in it, locked with flock(2)
// on Unix and LockFileEx on Windows) and refuses, with a [*DirInUseError]
// that names the process holding it and its server's client URL, a
// directory another server has, in this process or another. The file holds
// the owner's pid and URL; the lock itself belongs to the open file, so the
// operating system releases it when the process ends, however it ends
// (SIGKILL, a crash, a power loss): a restart never waits for a lock a dead
// process left, and nothing needs clearing by hand. [Server.Shutdown]
// releases it; the file stays.
//
// Processes that need the broker (several relays of one database,
// consumers) share one server: the first one's, reached at its client URL,
// or a real NATS deployment. The lock is advisory and local: it keeps out
// Courier's servers, not other programs, and a directory on a network file
// system shared between machines is not protected (flock may not reach
// across them); give each machine a directory on its own disk.
package embedded
