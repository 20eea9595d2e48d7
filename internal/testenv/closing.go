package testenv

import "github.com/courier-go/courier/broker"

// Closing is a subscriber that, when it closes, also closes what it runs
// on (a connection of its own).
type Closing struct {
	broker.Subscriber
	Also func()
}

// Close implements broker.Subscriber.
func (c Closing) Close() error {
	err := c.Subscriber.Close()
	c.Also()
	return err
}
