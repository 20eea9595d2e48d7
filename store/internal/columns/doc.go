// Package columns encodes message fields the way every dialect's outbox
// columns hold them.
package columns
