package setting

import (
	"fmt"
	"strings"
)

// AllTopics, alone in a list of topics (TopicSet), names every topic.
const AllTopics = "*"

// TopicSet checks topics, the value of the list of topic names called
// name (such as "inbox: ConsumerConfig.HoldKeys"): no empty names, no name
// twice, and AllTopics only alone. It returns whether a topic is in the
// set; nil for an empty list.
func TopicSet(name string, topics []string) (func(topic string) bool, error) {
	if len(topics) == 0 {
		return nil, nil
	}
	set := make(map[string]bool, len(topics))
	for i, t := range topics {
		switch {
		case strings.TrimSpace(t) == "":
			return nil, fmt.Errorf("%s[%d] is empty: name a topic, such as \"orders\", or %q alone for every topic", name, i, AllTopics)
		case t == AllTopics && len(topics) > 1:
			return nil, fmt.Errorf("%s holds %q and other topics: %q alone means every topic; list either it or the topics", name, AllTopics, AllTopics)
		case set[t]:
			return nil, fmt.Errorf("%s names topic %q twice: list each topic once", name, t)
		}
		set[t] = true
	}
	if set[AllTopics] {
		return func(string) bool { return true }, nil
	}
	return func(topic string) bool { return set[topic] }, nil
}
