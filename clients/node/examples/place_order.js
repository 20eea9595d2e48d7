'use strict';

// Place an order and the message that announces it, in one transaction:
// both are committed, or neither.
//
//   courier migrate --database-url sqlite:///tmp/shop.db   # once: Courier's tables
//   node place_order.js sqlite:///tmp/shop.db order-42 1999
//
// The database URL is the one Courier's commands take: postgres://… (pg),
// mysql://… (mysql2) or sqlite:///absolute/path.db (better-sqlite3). Run
// `courier relay` on the same URL to publish the message.

const outbox = require('@courier-go/outbox');

/** connect opens url and returns {tx, query(sql, args), close()}, placeholders ?. */
async function connect(url) {
  if (url.startsWith('postgres://') || url.startsWith('postgresql://')) {
    const pg = require('pg');
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    return {
      tx: client,
      query: (sql, args) => {
        let i = 0;
        return client.query(sql.replace(/\?/g, () => `$${++i}`), args);
      },
      close: () => client.end(),
    };
  }
  if (url.startsWith('mysql://')) {
    const conn = await require('mysql2/promise').createConnection(url);
    return { tx: conn, query: (sql, args) => conn.query(sql, args), close: () => conn.end() };
  }
  if (url.startsWith('sqlite:')) {
    const Database = require('better-sqlite3');
    const db = new Database(url.replace(/^sqlite:(\/\/)?/, ''), { timeout: 10000 });
    db.pragma('synchronous = FULL'); // a commit that returned is on disk (better-sqlite3 builds WAL files with NORMAL)
    return {
      tx: db,
      query: async (sql, args = []) => db.prepare(sql === 'BEGIN' ? 'BEGIN IMMEDIATE' : sql).run(...args),
      close: async () => db.close(),
    };
  }
  throw new Error(`${url} is no database URL: give postgres://…, mysql://… or sqlite:///path.db`);
}

/** placeOrder stores the order and its OrderPlaced message, and returns the message. */
async function placeOrder(db, orderId, total) {
  const msg = new outbox.Message('orders', orderId, 'OrderPlaced', { order_id: orderId, total }, {
    headers: { [outbox.HEADER_CORRELATION_ID]: `checkout-${orderId}` },
  });
  await db.query('BEGIN');
  try {
    await db.query('INSERT INTO orders (id, total) VALUES (?, ?)', [orderId, total]);
    await outbox.write(db.tx, msg); // in the same transaction as the order
    await db.query('COMMIT');
  } catch (err) {
    await db.query('ROLLBACK'); // the order goes with the message: never one without the other
    throw err;
  }
  return msg;
}

async function main(argv) {
  if (argv.length !== 3) throw new Error('usage: node place_order.js DATABASE_URL ORDER_ID TOTAL');
  const [url, orderId, total] = argv;
  const db = await connect(url);
  try {
    await db.query('CREATE TABLE IF NOT EXISTS orders (id VARCHAR(64) PRIMARY KEY, total INTEGER NOT NULL)');
    const msg = await placeOrder(db, orderId, Number(total));
    console.log(`placed ${orderId}: message ${msg.id} on topic ${msg.topic}`);
  } finally {
    await db.close();
  }
}

main(process.argv.slice(2)).catch((err) => {
  // A ValidationError names the field and the fix, as Courier's Go Writer does.
  console.error(`place_order: ${err.message}`);
  process.exitCode = 1;
});
