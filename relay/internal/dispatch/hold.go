package dispatch

import (
	"fmt"
	"slices"

	"github.com/courier-go/courier/relay/settings"
)

// Holds is the set of topics whose dead letters hold their key (a
// configuration's HoldKeys): the key's later messages wait behind the dead
// letter until it is replayed or discarded. The zero value holds none.
type Holds struct {
	all    bool
	topics map[string]bool
}

// NewHolds returns the set HoldKeys names: settings.AllTopics alone is
// every topic. Validate it first (Settings.Validate).
func NewHolds(topics []string) Holds {
	if slices.Equal(topics, []string{settings.AllTopics}) {
		return Holds{all: true}
	}
	h := Holds{topics: make(map[string]bool, len(topics))}
	for _, t := range topics {
		h.topics[t] = true
	}
	return h
}

// Hold reports whether a dead letter of topic holds its key.
func (h Holds) Hold(topic string) bool { return h.all || h.topics[topic] }

// Any reports whether any topic holds its keys.
func (h Holds) Any() bool { return h.all || len(h.topics) > 0 }

// validateHoldKeys reports the first bad name of topics, a configuration's
// HoldKeys (its name is field).
func validateHoldKeys(field string, topics []string) error {
	seen := make(map[string]bool, len(topics))
	for i, t := range topics {
		switch {
		case t == "":
			return fmt.Errorf("%s[%d] is empty: name a topic, or %q alone for every topic", field, i, settings.AllTopics)
		case t == settings.AllTopics && len(topics) > 1:
			return fmt.Errorf("%s has %q among other topics: use %q alone for every topic, or name the topics", field, settings.AllTopics, settings.AllTopics)
		case seen[t]:
			return fmt.Errorf("%s names %q twice: name each topic once", field, t)
		}
		seen[t] = true
	}
	return nil
}
