// Package timestamp is how Courier's wire formats write and read when a
// message's event occurred: RFC 3339 with nanoseconds, in UTC. The broker
// headers (package wire), the CloudEvents time attribute and JSON event
// format (package cloudevents) and the webhook envelope all use it, so that
// a time one of them reads is a time each of them can write again.
package timestamp
