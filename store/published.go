package store

import "time"

// PublishedCopy is the copy of a published message that a relay keeps
// with RelayConfig.KeepPublished (the CDC relay's KeepPublished alike), as
// an audit of the broker reads it: what the database says the broker
// acknowledged, and when.
type PublishedCopy struct {
	// ID is the outbox row's id: a key's messages are published in its
	// order.
	ID int64 `json:"id"`
	// MessageID is the message's id (courier.Message.ID), as text.
	MessageID string `json:"message_id"`
	Topic     string `json:"topic"`
	Key       string `json:"key"`
	Type      string `json:"type"`
	// PublishedAt is when the relay recorded the broker's acknowledgement,
	// on the store's clock.
	PublishedAt time.Time `json:"published_at"`
}

// Place is where a database holds a message.
type Place string

// The places of [Operations.Locate].
const (
	// PlacePending: in the outbox, not recorded as published (yet). A
	// broker holding it had it from a relay that has not recorded its
	// acknowledgement: it will be published again.
	PlacePending Place = "pending"
	// PlacePublished: a copy of it published (RelayConfig.KeepPublished).
	PlacePublished Place = "published"
	// PlaceDeadLetter: a relay-side dead letter.
	PlaceDeadLetter Place = "dead_letter"
)
