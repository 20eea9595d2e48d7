package brokerkind

import (
	"reflect"
	"strings"
)

// SystemOf names the messaging system behind v, a publisher or subscriber,
// for messaging.system in traces: its MessagingSystem method's answer when
// it has one (brokerurl.Broker), else the System of the registered Kind
// that its Kind method names, else that of the Kind named as the broker
// package v comes from (the last element of its import path: nats, kafka,
// amqp, webhook, memory). RabbitMQ is "rabbitmq", as the conventions spell
// it; what no registered Kind names is "courier".
func SystemOf(v any) string {
	switch x := v.(type) {
	case interface{ MessagingSystem() string }:
		return x.MessagingSystem()
	case interface{ Kind() string }:
		return systemOfKind(x.Kind())
	}
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return systemOfKind("")
	}
	p := t.PkgPath()
	return systemOfKind(p[strings.LastIndex(p, "/")+1:])
}

// systemOfKind returns the System of the Kind called name, or "courier".
func systemOfKind(name string) string {
	if k, ok := Named(name); ok {
		return k.SystemName()
	}
	return "courier"
}
