'use strict';

// MySQL and MariaDB: plain INSERTs, the rows Go's mysql.DatabaseSQL()
// writes; times are DATETIME(6) text in UTC, created_at (and a delay's
// start) the server's UTC_TIMESTAMP(6).

const { insertSQL, chunks } = require('./rows');
const { formatMicros } = require('./message');
const { writeError } = require('./schema');

const NOW = 'UTC_TIMESTAMP(6)';

/** datetime renders microseconds as DATETIME(6) text. */
function datetime(us) {
  return formatMicros(us, ' ', '');
}

/**
 * connectionOf returns the callback connection of tx, a mysql2
 * Connection or PoolConnection or their promise wrappers, or null.
 */
function connectionOf(tx) {
  if (tx === null || typeof tx !== 'object') return null;
  const c = tx.connection && tx.connection.config && typeof tx.connection.query === 'function' ? tx.connection : tx;
  if (c.config && typeof c.query === 'function' && typeof c.execute === 'function' && typeof c.getConnection !== 'function') return c;
  return null;
}

/** isPool reports whether tx is a mysql2 pool (callback or promise), on which no transaction is held. */
function isPool(tx) {
  return tx !== null && typeof tx === 'object' && typeof tx.getConnection === 'function';
}

const SERVER_STATUS_IN_TRANS = 1;
const SERVER_STATUS_AUTOCOMMIT = 2;

/**
 * autocommitting reports whether tx commits each statement by itself:
 * autocommit on and no transaction open, by the server's status flags
 * of its latest answer.
 */
function autocommitting(tx) {
  const status = connectionOf(tx).serverStatus;
  return typeof status === 'number' && (status & SERVER_STATUS_AUTOCOMMIT) !== 0 && (status & SERVER_STATUS_IN_TRANS) === 0;
}

function query(conn, sql, args) {
  return new Promise((resolve, reject) => conn.query(sql, args, (err, res) => (err ? reject(err) : resolve(res))));
}

/**
 * insert writes msgs (normalized and checked) in tx, a statement per 500
 * messages or 1 MiB of payloads and headers (which keeps a statement
 * within max_allowed_packet), due at due when it is given.
 */
async function insert(tx, msgs, limits, due) {
  const conn = connectionOf(tx);
  for (const chunk of chunks(msgs, 500, 1 << 20)) {
    let sql;
    let args;
    if (due) {
      const [dueSQL, dueArgs] = due.atMicros !== undefined ? ['?', [datetime(due.atMicros)]] : [`${NOW} + INTERVAL ? MICROSECOND`, [String(due.afterMicros)]];
      [sql, args] = insertSQL('courier_outbox_scheduled', chunk, datetime, ', due_at, created_at', `, ${dueSQL}, ${NOW}`, dueArgs);
    } else {
      [sql, args] = insertSQL('courier_outbox', chunk, datetime, ', created_at', `, ${NOW}`, []);
    }
    try {
      await query(conn, sql, args);
    } catch (err) {
      const what = due ? `schedule ${chunk.length} messages` : `insert ${chunk.length} outbox messages`;
      throw writeError(err, 'mysql', what, err.errno === 1146);
    }
  }
}

module.exports = { name: 'mysql', isClient: (tx) => connectionOf(tx) !== null, isPool, autocommitting, begin: 'await conn.beginTransaction()', insert };
