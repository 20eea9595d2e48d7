'use strict';

// SQLite: plain INSERTs, the rows Go's sqlite.DatabaseSQL() writes; times
// are INTEGER Unix microseconds by the writing process's clock.

const { insertSQL, chunks } = require('./rows');
const { nowMicros } = require('./message');
const { writeError } = require('./schema');

/** isClient reports whether tx is a better-sqlite3 Database. */
function isClient(tx) {
  return tx !== null && typeof tx === 'object' && typeof tx.prepare === 'function' && typeof tx.pragma === 'function' && 'inTransaction' in tx;
}

const statements = new WeakMap();

/** prepared returns db's statement of sql, prepared once per database. */
function prepared(db, sql) {
  let cache = statements.get(db);
  if (!cache) {
    cache = new Map();
    statements.set(db, cache);
  }
  let st = cache.get(sql);
  if (!st) {
    st = db.prepare(sql);
    if (cache.size < 64) cache.set(sql, st);
  }
  return st;
}

/**
 * insertSync writes msgs (normalized and checked) in db, a statement per
 * 1,000 messages, due at due when it is given. better-sqlite3 is
 * synchronous: this runs inside db.transaction(…) as well as between an
 * awaited BEGIN and COMMIT.
 */
function insertSync(db, msgs, limits, due) {
  const now = nowMicros();
  const micros = (us) => us;
  for (const chunk of chunks(msgs, 1000, 0)) {
    const rows = chunk.map((m) => ({ ...m, version: BigInt(m.version) }));
    let sql;
    let args;
    if (due) {
      const at = due.atMicros !== undefined ? due.atMicros : now + due.afterMicros;
      [sql, args] = insertSQL('courier_outbox_scheduled', rows, micros, ', due_at, created_at', ', ?, ?', [at, now]);
    } else {
      [sql, args] = insertSQL('courier_outbox', rows, micros, ', created_at', ', ?', [now]);
    }
    try {
      prepared(db, sql).run(...args);
    } catch (err) {
      const what = due ? `schedule ${chunk.length} messages` : `insert ${chunk.length} outbox messages`;
      throw writeError(err, 'sqlite', what, /no such table/.test(err.message));
    }
  }
}

module.exports = {
  name: 'sqlite',
  isClient,
  isPool: () => false,
  autocommitting: (db) => !db.inTransaction,
  begin: "writeSync inside db.transaction(…), or db.exec('BEGIN IMMEDIATE')",
  insert: async (...a) => insertSync(...a),
  insertSync,
};
