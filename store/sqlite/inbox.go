package sqlite

// markSQL inserts a dedup marker unless it exists. The transaction it runs
// in holds SQLite's write lock (see [Driver]), so a concurrent delivery of
// the same message waits for it and then finds the marker.
const markSQL = `INSERT INTO courier_inbox (consumer, message_id, processed_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`

// markGroupSQL begins the statement that inserts the markers of a group,
// and markGroupReturning ends it: it returns the id of each marker it
// inserted (RETURNING, SQLite 3.35 or newer). Its transaction holds the
// write lock, as markSQL's does.
const (
	markGroupSQL       = `INSERT INTO courier_inbox (consumer, message_id, processed_at) VALUES `
	markGroupReturning = ` ON CONFLICT DO NOTHING RETURNING message_id`
)
