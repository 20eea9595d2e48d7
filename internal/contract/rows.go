package contract

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// Rows is rows.json: what each dialect's Go inserter stores for each valid
// message of messages.json, read back from the database.
type Rows struct {
	// Contract is Version.
	Contract int `json:"contract"`
	// DueAt is the due time every message was scheduled for, in
	// TimeLayout.
	DueAt string `json:"due_at"`
	// Dialects holds the rows by dialect: "postgres", "mariadb" (MySQL 8
	// stores the same but for the headers' JSON text, which it
	// normalizes), "sqlite".
	Dialects map[string]DialectRows `json:"dialects"`
}

// DialectRows are one dialect's rows.
type DialectRows struct {
	// Outbox are the rows of courier_outbox, one per valid message, by
	// vector name, as Write stores them.
	Outbox []NamedRow `json:"outbox"`
	// Scheduled are the rows of courier_outbox_scheduled, as Schedule
	// stores them for DueAt.
	Scheduled []NamedRow `json:"scheduled"`
}

// NamedRow is the row of a valid vector.
type NamedRow struct {
	// Name is the vector's name in messages.json.
	Name string `json:"name"`
	// Row is the row.
	Row Row `json:"row"`
}

// Row is a row's message columns as the database holds them: text as it
// is, the payload by length and SHA-256, the headers' JSON as the
// database returns its text (null when the message has none), times as the
// dialect stores them (PostgreSQL and MySQL: text in TimeLayout, SQLite:
// the integer of microseconds since the Unix epoch).
type Row struct {
	MessageID   string          `json:"message_id"`
	Topic       string          `json:"topic"`
	OrderingKey string          `json:"ordering_key"`
	Type        string          `json:"type"`
	Version     int             `json:"version"`
	ContentType string          `json:"content_type"`
	Payload     Digest          `json:"payload"`
	Headers     *string         `json:"headers"`
	OccurredAt  json.RawMessage `json:"occurred_at"`
	// DueAt is a scheduled row's due time, stored like OccurredAt.
	DueAt json.RawMessage `json:"due_at,omitempty"`
}

// Digest stands for bytes too many to list: their length and SHA-256.
type Digest struct {
	Length int    `json:"length"`
	SHA256 string `json:"sha256"`
}

// DigestOf returns b's Digest.
func DigestOf(b []byte) Digest {
	sum := sha256.Sum256(b)
	return Digest{Length: len(b), SHA256: hex.EncodeToString(sum[:])}
}
