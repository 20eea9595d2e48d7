package main

import (
	"errors"
	"strings"
	"time"

	"github.com/courier-go/courier/inbox"
)

// consumerGroupFlags are the flags of a consumer's grouped commits
// (inbox.ConsumerConfig.Group), for the commands that run the shop's
// consumers: courier shop and courier demo.
type consumerGroupFlags struct {
	ConsumerGroup        int           `name:"consumer-group" placeholder:"N" help:"Apply up to N waiting deliveries in one database transaction: their inbox markers in one statement, each handler's effects, one commit, then their acknowledgements. 1: each delivery in a transaction of its own; 100 is what the bench measured best. A failing message leaves its group and runs alone; redeliveries run alone (docs/operations.md, \"Grouped commits (consumers)\")." default:"1" env:"CONSUMER_GROUP"`
	ConsumerGroupWait    time.Duration `name:"consumer-group-wait" help:"How long a worker with fewer than --consumer-group deliveries waits for more before it applies them. 0: a group closes at once when nothing else waits (no latency added)." env:"CONSUMER_GROUP_WAIT"`
	ConsumerGroupSlowRun time.Duration `name:"consumer-group-slow-run" help:"How long a handler may run in a group before the group gives it up and applies it alone (make it longer than the handler's usual runs). 0: 1s." env:"CONSUMER_GROUP_SLOW_RUN"`
}

// group returns the flags as an inbox.GroupConfig, or an error naming the
// flag to fix: the inbox's own checks (ConsumerConfig.Validate), in the
// flags' words.
func (f consumerGroupFlags) group() (inbox.GroupConfig, error) {
	g := inbox.GroupConfig{MaxMessages: f.ConsumerGroup, MaxWait: f.ConsumerGroupWait, SlowRun: f.ConsumerGroupSlowRun}
	if err := (inbox.ConsumerConfig{Group: g}).Validate(); err != nil {
		r := strings.NewReplacer(
			"inbox: ConsumerConfig.Group.MaxMessages", "--consumer-group",
			"inbox: ConsumerConfig.Group.MaxWait", "--consumer-group-wait",
			"inbox: ConsumerConfig.Group.SlowRun", "--consumer-group-slow-run",
		)
		return inbox.GroupConfig{}, errors.New(r.Replace(err.Error()))
	}
	return g, nil
}
