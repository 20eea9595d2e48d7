package testenv

import "go.uber.org/goleak"

// NATSServerLeaks are goleak options for the goroutines an embedded
// nats-server leaves behind when it shuts down in the middle of an atomic
// batch: the batch's staging file store (its flush loops, and the access
// time service it registered) is not stopped. They are the server's, not
// Courier's, and end with the process:
//
//	goleak.VerifyTestMain(testenv.M(m), testenv.NATSServerLeaks...)
var NATSServerLeaks = []goleak.Option{
	goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*msgBlock).flushLoop"),
	goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
	goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"),
}
