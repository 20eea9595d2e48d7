package amqp

// SetBeforeFirstConnect sets what runs between a partitioned subscriber's
// check of its queues and its first connection to consume, until the
// test ends.
func SetBeforeFirstConnect(t interface{ Cleanup(func()) }, f func()) {
	beforeFirstConnect = f
	t.Cleanup(func() { beforeFirstConnect = nil })
}
