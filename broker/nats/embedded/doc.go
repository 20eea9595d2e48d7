// Package embedded runs a NATS server with JetStream inside the current
// process: the broker of Courier's embedded default (no server to install)
// and of tests. Its store syncs every write to disk before acknowledging it.
package embedded
