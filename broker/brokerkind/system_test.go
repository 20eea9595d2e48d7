package brokerkind_test

import (
	"testing"

	_ "github.com/courier-go/courier/broker/amqp"
	"github.com/courier-go/courier/broker/brokerkind"
	_ "github.com/courier-go/courier/broker/kafka"
	"github.com/courier-go/courier/broker/memory"
)

// A kind registered by a test is named as any other.
func init() { brokerkind.Register(brokerkind.Kind{Name: "fake", System: "fake-system"}) }

type named struct{}

func (named) MessagingSystem() string { return "sqs" }

func TestSystemOf(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{memory.NewPublisher(), "memory"},
		{named{}, "sqs"},
		{kind("amqp"), "rabbitmq"},
		{kind("kafka"), "kafka"},
		{kind("fake"), "fake-system"},
		{kind("unknown"), "courier"},
		{struct{}{}, "courier"},
		{nil, "courier"},
	} {
		if got := brokerkind.SystemOf(tc.v); got != tc.want {
			t.Errorf("SystemOf(%T) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

type kind string

func (k kind) Kind() string { return string(k) }
