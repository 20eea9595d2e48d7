package sqlite

// markSQL inserts a dedup marker unless it exists. The transaction it runs
// in holds SQLite's write lock (see [Driver]), so a concurrent delivery of
// the same message waits for it and then finds the marker.
const markSQL = `INSERT INTO courier_inbox (consumer, message_id, processed_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`
