'use strict';

// The outbox row as Go's database/sql inserters write it on MySQL,
// MariaDB and SQLite (store/internal/columns): the message's columns in
// this order, then the row's own, one INSERT per chunk of messages.

const { headersJSON } = require('./headers');

const COLUMNS = 'message_id, topic, ordering_key, type, version, content_type, payload, headers, occurred_at';
const MARKS = '?, ?, ?, ?, ?, ?, ?, ?, ?';

/**
 * insertSQL returns the INSERT of msgs into table with the extra columns
 * more (", created_at") whose values are values (", ?"), and its
 * arguments: each message's columns, times encoded by time, then extra.
 */
function insertSQL(table, msgs, time, more, values, extra) {
  const row = `(${MARKS}${values})`;
  const args = [];
  for (const m of msgs) {
    args.push(m.id, m.topic, m.key, m.type, m.version, m.contentType, m.payload, headersJSON(m.headers), time(m.occurredAtMicros), ...extra);
  }
  return [`INSERT INTO ${table} (${COLUMNS}${more}) VALUES ${Array(msgs.length).fill(row).join(', ')}`, args];
}

/**
 * chunks splits msgs into statements of at most rows messages and, beyond
 * a statement's first message, at most bytes of payloads and headers
 * (0: no bound), as Go's inserters do.
 */
function chunks(msgs, rows, bytes) {
  const out = [];
  for (let start = 0; start < msgs.length;) {
    let end = start;
    let size = 0;
    while (end < msgs.length && end - start < rows) {
      const m = msgs[end];
      let n = m.payload.length;
      for (const [k, v] of Object.entries(m.headers || {})) n += Buffer.byteLength(k) + Buffer.byteLength(v);
      if (bytes > 0 && end > start && size + n > bytes) break;
      size += n;
      end++;
    }
    out.push(msgs.slice(start, end));
    start = end;
  }
  return out;
}

module.exports = { insertSQL, chunks };
