'use strict';

// Carries out a plan of test/polyglot (its format is in that package's
// documentation): reads it as JSON on stdin, runs its transactions with
// @courier-go/outbox, prints each message written as a line of JSON.

const { Message, write, schedule } = require('..');
const { normalize, formatMicros } = require('../lib/message');

/** connect returns the plan's database as {tx, query(sql, args)}, its placeholders ?. */
async function connect(dialect, database) {
  if (dialect === 'postgres') {
    const pg = require('pg');
    const c = new pg.Client({ connectionString: database.url });
    await c.connect();
    await c.query("SELECT set_config('search_path', $1, false)", [database.schema]);
    return {
      tx: c,
      query: (sql, args) => {
        let i = 0;
        return c.query(sql.replace(/\?/g, () => `$${++i}`), args);
      },
      close: () => c.end(),
    };
  }
  if (dialect === 'mysql') {
    const c = await require('mysql2/promise').createConnection(database.url);
    return { tx: c, query: (sql, args) => c.query(sql, args), close: () => c.end() };
  }
  if (dialect === 'sqlite') {
    const Database = require('better-sqlite3');
    const db = new Database(database.path, { timeout: 30000 });
    return {
      tx: db,
      // A write transaction from the start: the relay writes to the same file.
      query: async (sql, args = []) => db.prepare(sql === 'BEGIN' ? 'BEGIN IMMEDIATE' : sql).run(...args),
      close: async () => db.close(),
    };
  }
  throw new Error(`unknown dialect ${JSON.stringify(dialect)}`);
}

/** message returns the Message a plan's message describes. */
function message(m) {
  const kinds = ['payload_base64', 'payload_text', 'payload_json'].filter((k) => k in m);
  if (kinds.length !== 1) throw new Error(`message ${JSON.stringify(m)}: give exactly one of payload_base64, payload_text, payload_json`);
  const payload = 'payload_base64' in m ? Buffer.from(m.payload_base64, 'base64') : 'payload_text' in m ? m.payload_text : m.payload_json;
  const options = {};
  for (const [from, to] of [['id', 'id'], ['version', 'version'], ['content_type', 'contentType'], ['headers', 'headers'], ['occurred_at', 'occurredAt']]) {
    if (from in m) options[to] = m[from];
  }
  return new Message(m.topic, m.key, m.type, payload, options);
}

/** dueOf returns a plan's due time as schedule takes it. */
function dueOf(d) {
  return 'after_ms' in d ? { afterMs: d.after_ms } : d.at;
}

/** described is a written message as the harness reads it. */
function described(m) {
  const n = normalize(m);
  const out = {
    id: n.id, topic: n.topic, key: n.key, type: n.type, version: n.version, content_type: n.contentType,
    payload_base64: n.payload.toString('base64'), occurred_at: formatMicros(n.occurredAtMicros),
  };
  if (n.headers) out.headers = n.headers;
  return out;
}

async function main() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  const plan = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  const db = await connect(plan.dialect, plan.database);
  try {
    for (const [n, tx] of plan.transactions.entries()) {
      const msgs = tx.messages.map(message);
      await db.query('BEGIN');
      try {
        await db.query('INSERT INTO polyglot_orders (id, note) VALUES (?, ?)', [tx.order.id, tx.order.note]);
        if (tx.due) await schedule(db.tx, dueOf(tx.due), ...msgs);
        else await write(db.tx, ...msgs);
      } catch (err) {
        await db.query('ROLLBACK');
        throw err;
      }
      await db.query(tx.commit ? 'COMMIT' : 'ROLLBACK');
      for (const m of msgs) process.stdout.write(JSON.stringify({ tx: n, committed: tx.commit, message: described(m) }) + '\n');
    }
  } finally {
    await db.close();
  }
}

main().catch((err) => {
  process.stderr.write(`${err.stack}\n`);
  process.exitCode = 1;
});
