// Package brokerkind describes the kinds of broker Courier opens by URL,
// and keeps the register of them.
//
// A broker's package describes itself once, in a [Kind]: the schemes of
// its URLs, how such a URL is read (and the message when it cannot be),
// how the broker is opened, whether what it keeps can be read back, the
// fields the relay logs for it and its messaging.system name for
// tracing. The package registers its Kind when it is initialized:
//
//	func init() { brokerkind.Register(Kind) }
//
// Package brokerurl, the courier CLI and the tracing of the relay and the
// inbox read the register instead of knowing the brokers. The brokers that
// the CLI links are listed in one place, broker/brokerurl/brokers.go, one
// import each; adding a broker takes its package and a line there.
//
// Every broker is handed the same [Options]: each reads the fields that
// concern it (its Kind's documentation says which) and ignores the rest.
package brokerkind
