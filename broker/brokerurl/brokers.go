package brokerurl

// The brokers Courier opens by URL, one line each: each package registers
// its brokerkind.Kind when it is initialized. Adding a broker takes its
// package and a line here.
import (
	_ "github.com/courier-go/courier/broker/amqp"
	_ "github.com/courier-go/courier/broker/kafka"
	_ "github.com/courier-go/courier/broker/nats"
	_ "github.com/courier-go/courier/broker/webhook"
)
