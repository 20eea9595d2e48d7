package amqp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// A write to a connection the broker has just dropped is the connection's
// failure, never the message's: seen as "write: connection reset by peer"
// while RabbitMQ's app stopped, before the channel knew it was closed.
func TestConnectionLost(t *testing.T) {
	reset := &net.OpError{Op: "write", Net: "tcp", Err: fmt.Errorf("write: %w", syscall.ECONNRESET)}
	for _, err := range []error{reset, io.EOF, fmt.Errorf("frame: %w", io.ErrUnexpectedEOF), syscall.EPIPE, net.ErrClosed, amqp091.ErrClosed} {
		if !connectionLost(err) {
			t.Errorf("%v: not seen as a lost connection", err)
		}
	}
	for _, err := range []error{errors.New("value []int not supported"), amqp091.ErrFieldType} {
		if connectionLost(err) {
			t.Errorf("%v: seen as a lost connection; it is the message's", err)
		}
	}
}
