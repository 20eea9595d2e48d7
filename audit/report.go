package audit

import "time"

// Report is what an audit found. The counts are of the window; the
// findings list the first Config.Examples of each kind.
type Report struct {
	// From and To are the window audited: From as narrowed (see
	// Narrowed), To as given.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Slack is how far beyond the window each side was read.
	Slack time.Duration `json:"slack_ns"`
	// Narrowed says why From is later than the window asked for, one
	// reason per narrowing; empty when it is not.
	Narrowed []string `json:"narrowed,omitempty"`
	// Published counts the database's copies recorded in the window.
	Published int `json:"published"`
	// Stored counts the Courier messages the broker stored in the window,
	// duplicates included.
	Stored int `json:"stored"`

	// Lost are published copies that the broker does not hold.
	Lost Findings `json:"lost"`
	// Phantoms are messages on the broker unknown to the database.
	Phantoms Findings `json:"phantoms"`
	// Duplicates count the extra copies of messages the broker holds more
	// than once; each finding is one such message.
	Duplicates Findings `json:"duplicates"`
	// OrderBreaks are messages the broker holds after a later message of
	// their key (a higher outbox id), in the same log.
	OrderBreaks Findings `json:"order_breaks"`

	// Pending counts messages on the broker still pending in the outbox:
	// published, the acknowledgement not yet recorded (they will be
	// published again unless a relay records it).
	Pending int `json:"pending"`
	// PublishedElsewhen counts messages on the broker whose copy was
	// recorded more than Slack away from their broker timestamp.
	PublishedElsewhen int `json:"published_elsewhen"`
	// DeadLetters counts messages on the broker that are dead letters.
	DeadLetters int `json:"dead_letters"`
	// Foreign are messages on the broker that are not Courier's (they do
	// not decode as a Courier message).
	Foreign Findings `json:"foreign"`
}

// Alarms reports whether the audit found lost messages, phantoms or order
// breaks: what a consumer may have got wrong. Duplicates are not alarms
// (inboxes apply a message once); ask for them separately.
func (r *Report) Alarms() bool {
	return r.Lost.Count+r.Phantoms.Count+r.OrderBreaks.Count > 0
}

// Findings are the messages of one kind of finding: how many, and the
// first few.
type Findings struct {
	Count    int       `json:"count"`
	Examples []Finding `json:"examples"`
}

// add counts f and keeps it while fewer than limit are kept.
func (fs *Findings) add(limit int, f Finding) { fs.addN(limit, 1, f) }

// addN counts n and keeps f while fewer than limit are kept.
func (fs *Findings) addN(limit, n int, f Finding) {
	fs.Count += n
	if len(fs.Examples) < limit {
		fs.Examples = append(fs.Examples, f)
	}
}

// Finding is one message that does not match, with what each side says
// of it (the fields of a side that does not hold it are zero).
type Finding struct {
	MessageID string `json:"message_id,omitempty"`
	Topic     string `json:"topic,omitempty"`
	Key       string `json:"key,omitempty"`
	Type      string `json:"type,omitempty"`
	// ID and PublishedAt are the database's: the outbox id and when its
	// publication was recorded.
	ID          int64     `json:"id,omitempty"`
	PublishedAt time.Time `json:"published_at,omitzero"`
	// StoredAt, Log and Offset are the broker's: when and where it keeps
	// the message.
	StoredAt time.Time `json:"stored_at,omitzero"`
	Log      string    `json:"log,omitempty"`
	Offset   int64     `json:"offset"`
	// Detail says more: the copies of a duplicate, the message of the key
	// an order break came after, why a message is not Courier's.
	Detail string `json:"detail,omitempty"`
}
