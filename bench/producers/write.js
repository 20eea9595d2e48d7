// Times the Node.js client's write path for the bench's producers section.
//
// Usage: node write.js SPEC, where SPEC is the JSON of bench/producers.go's
// producerTarget. It writes SPEC.n transactions in a row, each inserting one
// bench_orders row and one message with the client's write, and prints
// {"seconds": …}: the loop's time, without node's start. The drivers come
// from NODE_PATH.
'use strict';

const path = require('node:path');
const outbox = require(path.join(__dirname, '..', '..', 'clients', 'node'));

const PAYLOAD = Buffer.from('{"order":"order-0000000","customer":"customer-42","total":12345,"currency":"EUR","lines":3}');

function message(i) {
  return new outbox.Message('orders', `order-${i % 1000}`, 'OrderPlaced', PAYLOAD, { contentType: 'application/json' });
}

async function postgres(spec) {
  const { Client } = require('pg');
  const client = new Client({ connectionString: spec.url });
  await client.connect();
  await client.query("SELECT set_config('search_path', $1, false)", [spec.schema]);
  const start = process.hrtime.bigint();
  for (let i = 0; i < spec.n; i++) {
    await client.query('BEGIN');
    await client.query('INSERT INTO bench_orders (id, total) VALUES ($1, $2)', [`o-${i}`, i]);
    await outbox.write(client, message(i));
    await client.query('COMMIT');
  }
  const took = process.hrtime.bigint() - start;
  await client.end();
  return took;
}

async function mysql(spec) {
  const mysql2 = require('mysql2/promise');
  const conn = await mysql2.createConnection({ host: spec.host, port: spec.port, user: spec.user, password: spec.password || '', database: spec.database });
  const start = process.hrtime.bigint();
  for (let i = 0; i < spec.n; i++) {
    await conn.beginTransaction();
    await conn.execute('INSERT INTO bench_orders (id, total) VALUES (?, ?)', [`o-${i}`, i]);
    await outbox.write(conn, message(i));
    await conn.commit();
  }
  const took = process.hrtime.bigint() - start;
  await conn.end();
  return took;
}

function sqlite(spec) {
  const Database = require('better-sqlite3');
  const db = new Database(spec.path, { timeout: 30000 });
  db.pragma('synchronous = FULL'); // as Courier's own connections: a commit is on disk when it returns
  const insert = db.prepare('INSERT INTO bench_orders (id, total) VALUES (?, ?)');
  const start = process.hrtime.bigint();
  const placeOrder = db.transaction((i) => {
    insert.run(`o-${i}`, i);
    outbox.writeSync(db, message(i));
  });
  for (let i = 0; i < spec.n; i++) {
    placeOrder.immediate(i);
  }
  const took = process.hrtime.bigint() - start;
  db.close();
  return took;
}

async function main() {
  const spec = JSON.parse(process.argv[2]);
  const run = { postgres, mysql, sqlite }[spec.dialect];
  if (!run) throw new Error(`unknown dialect ${spec.dialect}`);
  const took = await run(spec);
  process.stdout.write(JSON.stringify({ seconds: Number(took) / 1e9 }) + '\n');
}

main().catch((err) => {
  process.stderr.write(`${err.stack || err}\n`);
  process.exit(1);
});
