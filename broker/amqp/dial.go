package amqp

import (
	"fmt"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/courier-go/courier/internal/redact"
)

// connectionName names Courier's connections in RabbitMQ's management
// tools.
const connectionName = "courier"

// dial connects to the broker.
func (c Config) dial() (*amqp091.Connection, error) {
	timeout := c.DialTimeout
	if uri, err := amqp091.ParseURI(c.URL); err == nil && uri.ConnectionTimeout > 0 {
		timeout = time.Duration(uri.ConnectionTimeout) * time.Millisecond
	}
	conn, err := amqp091.DialConfig(c.URL, amqp091.Config{
		Heartbeat:  c.Heartbeat,
		Dial:       amqp091.DefaultDial(timeout),
		Properties: amqp091.Table{"connection_name": connectionName},
	})
	if err != nil {
		return nil, fmt.Errorf("amqp: connect to %s: %w", redact.URL(c.URL), err)
	}
	return conn, nil
}
