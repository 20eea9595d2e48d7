// Package broker defines how Courier talks to a message broker: a Publisher
// for the relay, a Subscriber for consumers. Each broker has a sub-package
// (broker/nats for NATS JetStream, …) that implements these interfaces; the
// relay and the inbox depend only on this package. Each broker package
// also describes itself in a broker/brokerkind.Kind, which is how
// broker/brokerurl opens it by URL.
//
// The error contract of Publish (see Publisher) sorts every failure into an
// outage ([ErrUnavailable], retried without counting), a refusal for good
// ([ErrRejected], a dead letter at once; [Permanent] is the one test of it)
// and everything else (a counted failure). Package broker/wire is the one
// codec between a message and the headers every broker carries it in.
package broker
