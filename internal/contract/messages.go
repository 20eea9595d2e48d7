package contract

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
)

// Version is the contract's version: the directory testdata/contract/v1
// and the "contract" member of every vector file.
const Version = 1

// Messages is messages.json: the messages a writer must accept, and the
// ones it must refuse with the error each names.
type Messages struct {
	// Contract is Version.
	Contract int `json:"contract"`
	// Limits are the limits the vectors were validated with: Courier's
	// defaults.
	Limits Limits `json:"limits"`
	// Valid are messages every writer accepts.
	Valid []Valid `json:"valid"`
	// Invalid are messages every writer refuses, each written alone.
	Invalid []Invalid `json:"invalid"`
	// Batches are several messages written in one call, one of them
	// invalid: the Writer's error names its place.
	Batches []Batch `json:"batches"`
}

// Limits are the limits of the vectors: the payload's and the headers'
// (courier.Limits' defaults), and the fixed ones of names and keys.
type Limits struct {
	MaxPayloadBytes int `json:"max_payload_bytes"`
	MaxHeaderBytes  int `json:"max_header_bytes"`
	MaxNameBytes    int `json:"max_name_bytes"`
	MaxKeyBytes     int `json:"max_key_bytes"`
}

// DefaultLimits are the limits Validate applies to a writer with zero
// courier.Limits.
var DefaultLimits = Limits{
	MaxPayloadBytes: courier.DefaultMaxPayloadBytes,
	MaxHeaderBytes:  courier.DefaultMaxHeaderBytes,
	MaxNameBytes:    courier.MaxNameBytes,
	MaxKeyBytes:     courier.MaxKeyBytes,
}

// Valid is a message every writer accepts.
type Valid struct {
	// Name names the vector; rows.json and brokers.json use it.
	Name string `json:"name"`
	// Message is the message.
	Message Message `json:"message"`
}

// Invalid is a message every writer refuses.
type Invalid struct {
	// Name names the vector.
	Name string `json:"name"`
	// Message is the message.
	Message Message `json:"message"`
	// Error is the error a writer gives for it.
	Error Error `json:"error"`
	// NotIn lists the writers that cannot even be given the message
	// ("node", "python", "postgres"), for the reason Why.
	NotIn []string `json:"not_in,omitempty"`
	// Why says why the writers of NotIn cannot be given it.
	Why string `json:"why,omitempty"`
}

// Batch is several messages written in one call, one of them invalid.
type Batch struct {
	// Name names the vector.
	Name string `json:"name"`
	// Messages are the messages, in the order written.
	Messages []Message `json:"messages"`
	// Index is the place of the invalid message, from 1.
	Index int `json:"index"`
	// Error is the error a writer gives for the call: its Writer text names
	// the message's place (outbox: message 2 of 3: …).
	Error Error `json:"error"`
}

// Error is a writer's error for an invalid message: the
// courier.ValidationError's parts and texts.
type Error struct {
	// Field names the field (Topic, Headers["x-bad name"]).
	Field string `json:"field"`
	// Problem says what is wrong with it.
	Problem string `json:"problem"`
	// Fix says what to do.
	Fix string `json:"fix"`
	// Error is the ValidationError's text: courier: message.FIELD PROBLEM: FIX.
	Error string `json:"error"`
	// Writer is the outbox Writer's text: "outbox: " and Error, or, for a
	// message of a Batch, "outbox: message I of N: " and Error.
	Writer string `json:"writer"`
}

// Message is a vector's message, every field explicit.
type Message struct {
	// ID is the id, a UUID in its text form.
	ID string `json:"id"`
	// Topic, Key, Type and ContentType are Message's fields.
	Topic       Text `json:"topic"`
	Key         Text `json:"key"`
	Type        Text `json:"type"`
	Version     int  `json:"version"`
	ContentType Text `json:"content_type"`
	// Payload is the payload.
	Payload Bytes `json:"payload_base64"`
	// Headers are the headers, absent when there are none.
	Headers map[string]Text `json:"headers,omitempty"`
	// OccurredAt is RFC 3339 in UTC with microseconds, or
	// 0001-01-01T00:00:00.000000Z: not set.
	OccurredAt string `json:"occurred_at"`
}

// TimeLayout is the layout of Message.OccurredAt and of every time in the
// vectors: RFC 3339, UTC, microseconds.
const TimeLayout = "2006-01-02T15:04:05.000000Z"

// Courier returns the message as a courier.Message.
func (m Message) Courier() (courier.Message, error) {
	id, err := uuid.Parse(m.ID)
	if err != nil {
		return courier.Message{}, fmt.Errorf("contract: id %q: %w", m.ID, err)
	}
	at, err := time.Parse(time.RFC3339Nano, m.OccurredAt)
	if err != nil {
		return courier.Message{}, fmt.Errorf("contract: occurred_at %q: %w", m.OccurredAt, err)
	}
	cm := courier.Message{
		ID:          id,
		Topic:       m.Topic.String(),
		Key:         m.Key.String(),
		Type:        m.Type.String(),
		Version:     m.Version,
		ContentType: m.ContentType.String(),
		Payload:     m.Payload.Bytes(),
		OccurredAt:  at.UTC(),
	}
	if len(m.Headers) > 0 {
		cm.Headers = make(map[string]string, len(m.Headers))
		for name, value := range m.Headers {
			cm.Headers[name] = value.String()
		}
	}
	return cm, nil
}

// ErrorOf returns the vector form of a Validate error err and the Writer's
// error for the same message, or an error when err is not a
// courier.ValidationError.
func ErrorOf(validate, writer error) (Error, error) {
	ve, ok := validate.(*courier.ValidationError)
	if !ok || writer == nil {
		return Error{}, fmt.Errorf("contract: want a *courier.ValidationError and a Writer error, got %v and %v", validate, writer)
	}
	return Error{Field: ve.Field, Problem: ve.Problem, Fix: ve.Fix, Error: ve.Error(), Writer: writer.Error()}, nil
}
