package memory

import "github.com/courier-go/courier/broker/brokerkind"

// Kind registers the in-memory broker for tracing (messaging.system
// "memory"). It has no URL: a Publisher is made with NewPublisher.
var Kind = brokerkind.Kind{Name: "memory"}

func init() { brokerkind.Register(Kind) }
