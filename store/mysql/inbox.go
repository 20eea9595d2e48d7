package mysql

import (
	"fmt"
)

// maxConsumer is the longest consumer name courier_inbox holds, in bytes.
const maxConsumer = 255

// checkConsumer refuses a consumer name the schema would truncate (outside
// strict mode) or reject.
func checkConsumer(consumer string) error {
	if len(consumer) > maxConsumer {
		return fmt.Errorf("consumer name of %d bytes: courier_inbox holds names of up to %d bytes; choose a shorter one", len(consumer), maxConsumer)
	}
	return nil
}

// markSQL inserts a dedup marker unless it exists. INSERT IGNORE ignores the
// duplicate only after the transaction that inserted it ended: while it is
// open, InnoDB makes this insert wait for its row lock, so a concurrent
// delivery of the same message waits for the first, then finds its marker
// (or, when the first rolled back, inserts its own). IGNORE also turns other
// errors into warnings, which is why the consumer name is checked first and
// the message id is always 36 characters.
const markSQL = `INSERT IGNORE INTO courier_inbox (consumer, message_id, processed_at) VALUES (?, ?, UTC_TIMESTAMP(6))`

// markGroupSQL begins the statement that inserts the markers of a group,
// as markSQL does one. MySQL has no RETURNING: the inbox tells the markers
// it inserted by the transaction's snapshot (sqlstore.Inbox.MarkGroup).
const markGroupSQL = `INSERT IGNORE INTO courier_inbox (consumer, message_id, processed_at) VALUES `

// replayFailedSQL appends an entry to the history, in the format of the
// relay's histories.
const replayFailedSQL = `UPDATE courier_inbox_dead_letters
SET replay_requested = NULL, last_error = ?, attempts = attempts + 1,
    history = JSON_ARRAY_APPEND(COALESCE(history, JSON_ARRAY()), '$',
        JSON_OBJECT('at', DATE_FORMAT(UTC_TIMESTAMP(6), '%Y-%m-%dT%H:%i:%s.%fZ'), 'error', ?))
WHERE id = ?`

// deleteMarkersSQL deletes the oldest markers first, along the index on
// processed_at.
const deleteMarkersSQL = `DELETE FROM courier_inbox WHERE processed_at < ? ORDER BY processed_at LIMIT ?`

// holdKey selects a key of courier_inbox_holds along its unique key, by
// the hash of the key (a key may be too long for an index of its own).
const holdKey = `key_hash = UNHEX(SHA2(?, 256))`
