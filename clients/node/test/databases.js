'use strict';

// The databases the tests write to, each behind the same small interface,
// named by the environment the Go runner (client_test.go) sets:
// COURIER_NODE_POSTGRES_URL (a migrated schema, its search_path in the
// URL's options), COURIER_NODE_MYSQL_URL (a migrated MySQL or MariaDB
// database) and COURIER_NODE_SQLITE_PATH (a migrated SQLite file). An
// unset one skips its tests.

/**
 * database completes a database's interface from its query function q
 * (sql with ? placeholders, arguments; resolves to rows), its
 * transaction tx for write, its text of a time column as Unix
 * microseconds and its text of the headers column.
 */
function database({ tx, q, us, headersText, vectorTime, close }) {
  return {
    tx,
    query: q,
    begin: () => q('BEGIN'),
    commit: () => q('COMMIT'),
    rollback: () => q('ROLLBACK'),
    /**
     * rows reads table's rows in id order: the message's columns, the
     * headers' text as headers_text, and each time column in times
     * (occurred_at, created_at by default) as Unix microseconds in text,
     * named with _us for _at.
     */
    rows: async (table, times = ['occurred_at', 'created_at'], where = '') => {
      const cols = times.map((c) => `, ${us(c)} AS ${c.replace(/_at$/, '_us')}`).join('');
      const rows = await q(`SELECT message_id, topic, ordering_key, type, version, content_type, payload, ` +
        `${headersText} AS headers_text${cols} FROM ${table} ${where} ORDER BY id`);
      return rows.map((r) => ({ ...r, payload: Buffer.from(r.payload), version: Number(r.version) }));
    },
    /**
     * vectorRows reads table's rows in id order in the form of the
     * contract's rows.json: the payload as its length and SHA-256, the
     * headers' text, times as the dialect holds them (text in UTC, or
     * SQLite's integer microseconds), due_at too when due.
     */
    vectorRows: async (table, due = false) => {
      const times = ['occurred_at', ...(due ? ['due_at'] : [])].map((c) => `, ${vectorTime(c)} AS ${c}`).join('');
      const rows = await q(`SELECT message_id, topic, ordering_key, type, version, content_type, payload, ` +
        `${headersText} AS headers${times} FROM ${table} ORDER BY id`);
      return rows.map((r) => ({
        ...r,
        version: Number(r.version),
        payload: { length: r.payload.length, sha256: require('node:crypto').createHash('sha256').update(r.payload).digest('hex') },
      }));
    },
    close,
  };
}

/** postgres opens a pg Client on COURIER_NODE_POSTGRES_URL. */
async function postgres() {
  const pg = require('pg');
  const c = new pg.Client({ connectionString: process.env.COURIER_NODE_POSTGRES_URL });
  await c.connect();
  return database({
    tx: c,
    q: async (sql, args = []) => {
      let i = 0;
      return (await c.query(sql.replace(/\?/g, () => `$${++i}`), args)).rows;
    },
    us: (col) => `(extract(epoch FROM ${col}) * 1000000)::bigint::text`,
    headersText: 'headers::text',
    vectorTime: (col) => `to_char(${col} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`,
    close: () => c.end(),
  });
}

/** mysql opens a mysql2 connection on COURIER_NODE_MYSQL_URL, the promise API's when promise is true. */
async function mysql(promise) {
  if (promise) {
    const c = await require('mysql2/promise').createConnection(process.env.COURIER_NODE_MYSQL_URL);
    return database({ tx: c, q: async (sql, args = []) => (await c.query(sql, args))[0], us: mysqlMicros, headersText: MYSQL_HEADERS, vectorTime: mysqlText, close: () => c.end() });
  }
  const c = require('mysql2').createConnection(process.env.COURIER_NODE_MYSQL_URL);
  return database({
    tx: c,
    q: (sql, args = []) => new Promise((resolve, reject) => c.query(sql, args, (e, r) => (e ? reject(e) : resolve(r)))),
    us: mysqlMicros,
    headersText: MYSQL_HEADERS,
    vectorTime: mysqlText,
    close: () => new Promise((resolve) => c.end(resolve)),
  });
}

// The headers column's text: mysql2 would decode a JSON column.
const MYSQL_HEADERS = 'CAST(headers AS CHAR)';

function mysqlText(col) {
  return `DATE_FORMAT(${col}, '%Y-%m-%dT%H:%i:%s.%fZ')`;
}

function mysqlMicros(col) {
  return `CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', ${col}) AS CHAR)`;
}

/** sqlite opens the better-sqlite3 database at COURIER_NODE_SQLITE_PATH. */
async function sqlite() {
  const Database = require('better-sqlite3');
  const db = new Database(process.env.COURIER_NODE_SQLITE_PATH);
  db.pragma('busy_timeout = 5000');
  return database({
    tx: db,
    q: async (sql, args = []) => {
      const st = db.prepare(sql === 'BEGIN' ? 'BEGIN IMMEDIATE' : sql);
      if (st.reader) return st.all(...args);
      st.run(...args);
      return [];
    },
    us: (col) => `CAST(${col} AS TEXT)`,
    headersText: 'headers',
    vectorTime: (col) => col,
    close: async () => db.close(),
  });
}

/** DATABASES lists the databases to test, with the environment variable each needs. */
const DATABASES = [
  { name: 'postgres', env: 'COURIER_NODE_POSTGRES_URL', open: postgres },
  { name: 'mysql2 callback', env: 'COURIER_NODE_MYSQL_URL', open: () => mysql(false) },
  { name: 'mysql2 promise', env: 'COURIER_NODE_MYSQL_URL', open: () => mysql(true) },
  { name: 'sqlite', env: 'COURIER_NODE_SQLITE_PATH', open: sqlite },
];

module.exports = { DATABASES };
