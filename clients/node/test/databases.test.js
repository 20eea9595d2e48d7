'use strict';

// Writes and schedules on each real database: the rows, the transaction's
// commit and rollback, the errors, the due times.

const test = require('node:test');
const assert = require('node:assert/strict');
const { Message, ValidationError, write, schedule } = require('..');
const { DATABASES } = require('./databases');
const contract = require('./contract');

const AT = '2026-01-02T03:04:05.123456Z';
const AT_US = '1767323045123456';

/** samples are messages whose stored form is known: Go's encoding of their headers is written out. */
function samples() {
  return [
    {
      message: new Message('orders', 'order-42', 'OrderPlaced', { total: 42 }, {
        id: '0192f3a4-0000-7000-8000-000000000001',
        occurredAt: AT,
        headers: { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', 'x-html': '<a&b>', 'x-tab': 'a\tb\u2028', 'Courier-Correlation-Id': 'c-1' },
      }),
      headers: '{"Courier-Correlation-Id":"c-1","traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","x-html":"\\u003ca\\u0026b\\u003e","x-tab":"a\\tb\\u2028"}',
    },
    {
      message: new Message('订单', 'ключ 42', 'Ünïcode', Buffer.from([0, 1, 2, 255]), {
        id: '0192F3A4-0000-7000-8000-000000000002', version: 3, contentType: 'application/x-raw', occurredAt: '2026-01-02T04:04:05.5+01:00',
      }),
      headers: null,
    },
    { message: new Message('orders', 'order-43', 'Empty', null, { id: '0192f3a4-0000-7000-8000-000000000003', occurredAt: AT, headers: {} }), headers: null },
  ];
}

/** check asserts that row holds m, whose headers Go stores as the text headers. */
function check(row, m, headers, dialect, mariadb) {
  assert.equal(row.message_id, m.id.toLowerCase());
  assert.equal(row.topic, m.topic);
  assert.equal(row.ordering_key, m.key);
  assert.equal(row.type, m.type);
  assert.equal(row.version, m.version);
  assert.equal(row.content_type, m.contentType);
  assert.deepEqual(row.payload, Buffer.from(m.payload));
  if (dialect === 'postgres' || (dialect === 'mysql2' && !mariadb)) {
    // jsonb and MySQL's JSON keep their own form of the object; MariaDB's
    // JSON and SQLite's TEXT keep the text written.
    assert.deepEqual(row.headers_text === null ? null : JSON.parse(row.headers_text), headers === null ? null : JSON.parse(headers));
  } else {
    assert.equal(row.headers_text, headers);
  }
}

for (const db of DATABASES) {
  const skip = process.env[db.env] ? false : `${db.env} is not set`;
  const dialect = db.name.split(' ')[0];
  test.describe(db.name, { skip, timeout: 60000 }, () => {
    let d;
    let mariadb = false;
    test.before(async () => {
      d = await db.open();
      if (dialect === 'mysql2') mariadb = /MariaDB/i.test((await d.query('SELECT VERSION() AS v'))[0].v);
    });
    test.after(() => d && d.close());
    test.beforeEach(async () => {
      await d.query('DELETE FROM courier_outbox');
      await d.query('DELETE FROM courier_outbox_scheduled');
    });

    test('writes the rows Go writes, in the caller\'s transaction', async () => {
      const s = samples();
      await d.begin();
      const ids = await write(d.tx, ...s.map((x) => x.message));
      await d.commit();
      assert.deepEqual(ids, s.map((x) => x.message.id.toLowerCase()));
      const rows = await d.rows('courier_outbox');
      assert.equal(rows.length, s.length);
      rows.forEach((r, i) => check(r, s[i].message, s[i].headers, dialect, mariadb));
      assert.equal(rows[0].occurred_us, AT_US);
      assert.equal(rows[1].occurred_us, String(BigInt(AT_US) + 500000n - 123456n));
      const now = BigInt(Date.now()) * 1000n;
      for (const r of rows) {
        assert.ok(BigInt(r.created_us) > now - 60000000n && BigInt(r.created_us) < now + 60000000n, `created_at ${r.created_us} is not about now, ${now}`);
      }
    });

    test('a rolled-back transaction leaves no message', async () => {
      await d.begin();
      await write(d.tx, samples()[0].message);
      await d.rollback();
      assert.equal((await d.rows('courier_outbox')).length, 0);
    });

    test('an invalid message is refused before anything is written, and the transaction goes on', async () => {
      await d.begin();
      await assert.rejects(write(d.tx, samples()[0].message, new Message('orders', '', 'T', null)), {
        name: 'ValidationError',
        message: 'outbox: message 2 of 2: courier: message.Key is empty: set the ordering key, usually the aggregate id such as "order-42"',
      });
      await write(d.tx, samples()[2].message);
      await d.commit();
      assert.deepEqual((await d.rows('courier_outbox')).map((r) => r.message_id), [samples()[2].message.id]);
    });

    test('schedules at a time and after a delay by the database\'s clock', async () => {
      const s = samples();
      await d.begin();
      await schedule(d.tx, new Date('2030-01-02T03:04:05.678Z'), s[0].message);
      await schedule(d.tx, '2030-01-02T03:04:05.678901Z', s[1].message);
      await schedule(d.tx, { afterMs: 90 * 60 * 1000 }, s[2].message);
      await d.commit();
      const rows = await d.rows('courier_outbox_scheduled', ['occurred_at', 'created_at', 'due_at', 'released_at']);
      assert.equal(rows.length, 3);
      rows.forEach((r, i) => check(r, s[i].message, s[i].headers, dialect, mariadb));
      assert.equal(rows[0].due_us, '1893553445678000');
      assert.equal(rows[1].due_us, '1893553445678901');
      assert.equal(BigInt(rows[2].due_us) - BigInt(rows[2].created_us), 90n * 60n * 1000000n);
      assert.deepEqual(rows.map((r) => r.released_us), [null, null, null]);
      assert.equal(rows[0].occurred_us, AT_US);
    });

    test('a write of more messages than a statement holds keeps their order', async () => {
      // MySQL's statements hold 500 messages or 1 MiB of payloads, SQLite's 1,000.
      const msgs = Array.from({ length: 1201 }, (_, i) => new Message('orders', `order-${i % 7}`, 'Numbered', String(i)));
      msgs.push(...Array.from({ length: 3 }, (_, i) => new Message('orders', 'big', 'Big', Buffer.alloc(600 << 10, i))));
      await d.begin();
      await write(d.tx, ...msgs);
      await d.commit();
      const rows = await d.rows('courier_outbox');
      assert.deepEqual(rows.map((r) => r.message_id), msgs.map((m) => m.id));
      assert.deepEqual(rows.slice(-3).map((r) => [r.payload.length, r.payload[0]]), [[600 << 10, 0], [600 << 10, 1], [600 << 10, 2]]);
    });

    test('a connection that commits each statement by itself is refused', async () => {
      await assert.rejects(write(d.tx, samples()[0].message), { name: 'TypeError', message: /commits each statement by itself \(autocommit\)/ });
      await assert.rejects(schedule(d.tx, { afterMs: 1 }, samples()[0].message), /autocommit/);
      assert.equal((await d.rows('courier_outbox')).length, 0);
      await d.begin();
      await write(d.tx, samples()[0].message);
      await d.rollback();
    });

    test('a zero due time is refused', async () => {
      await assert.rejects(schedule(d.tx, { afterMs: 0 }, samples()[0].message), /outbox: schedule: the due time is zero/);
      await assert.rejects(schedule(d.tx, new Date('0001-01-01T00:00:00Z'), samples()[0].message), /the due time is zero/);
    });

    test('the contract\'s valid vectors are written and read back', async () => {
      const vectors = contract.vectors();
      const valid = vectors.valid.filter((v) => contract.forNode(v) && !(v.not_in || []).includes(dialect));
      await d.begin();
      for (const v of valid) await write(d.tx, ...contract.messagesOf(v), contract.optionsOf(v));
      await d.commit();
      const rows = await d.rows('courier_outbox');
      const want = valid.flatMap((v) => contract.messagesOf(v));
      assert.equal(rows.length, want.length);
      rows.forEach((r, i) => assert.equal(r.message_id, want[i].id.toLowerCase()));
    });

    test('the rows of the contract\'s valid vectors are rows.json\'s, written and scheduled', async (t) => {
      const want = contract.load('rows.json');
      const name = dialect === 'mysql2' ? (mariadb ? 'mariadb' : null) : dialect;
      if (!name) return t.skip('rows.json holds MariaDB\'s rows, not MySQL\'s');
      const valid = contract.vectors().valid.filter(contract.forNode);
      await d.begin();
      for (const v of valid) await write(d.tx, ...contract.messagesOf(v));
      await d.commit();
      await d.begin();
      await schedule(d.tx, want.due_at, ...valid.flatMap((v) => contract.messagesOf(v)));
      await d.commit();
      for (const [table, part, due] of [['courier_outbox', 'outbox', false], ['courier_outbox_scheduled', 'scheduled', true]]) {
        const rows = await d.vectorRows(table, due);
        const byName = new Map(want.dialects[name][part].map((r) => [r.name, r.row]));
        assert.equal(rows.length, valid.length);
        rows.forEach((row, i) => assert.deepEqual(row, byName.get(valid[i].name), `${part} ${valid[i].name}`));
      }
    });

    test('the contract\'s invalid vectors and batches get the Go Writer\'s errors', async () => {
      const vectors = contract.vectors();
      for (const v of [...vectors.invalid, ...vectors.batches].filter(contract.forNode)) {
        await assert.rejects(write(d.tx, ...contract.messagesOf(v), contract.optionsOf(v)), (err) => {
          assert.ok(err instanceof ValidationError, `${v.name}: ${err.stack}`);
          assert.equal(err.message, v.error.writer, v.name);
          assert.deepEqual([err.field, err.problem, err.fix], [v.error.field, v.error.problem, v.error.fix], v.name);
          return true;
        });
      }
      assert.equal((await d.rows('courier_outbox')).length, 0);
    });

    if (dialect !== 'sqlite') test('a pool is refused: it holds no transaction; a client taken from it is not', async () => {
      const pool = dialect === 'postgres'
        ? new (require('pg').Pool)({ connectionString: process.env.COURIER_NODE_POSTGRES_URL })
        : require('mysql2').createPool(process.env.COURIER_NODE_MYSQL_URL);
      try {
        await assert.rejects(write(pool, samples()[0].message), { name: 'TypeError', message: /pool, which holds no transaction/ });
        await assert.rejects(write(dialect === 'postgres' ? pool : pool.promise(), samples()[0].message), /pool, which holds no transaction/);
        // A client or connection taken from the pool is what to pass.
        const conn = dialect === 'postgres' ? await pool.connect() : await pool.promise().getConnection();
        try {
          await conn.query('BEGIN');
          assert.deepEqual(await write(conn, samples()[2].message), [samples()[2].message.id]);
          await conn.query('COMMIT');
        } finally {
          conn.release();
        }
        assert.equal((await d.rows('courier_outbox')).length, 1);
      } finally {
        await new Promise((resolve) => pool.end(resolve));
      }
    });

    if (dialect === 'postgres') postgresOnly(() => d);
  });
}

/** postgresOnly tests what courier_write and courier_schedule add on PostgreSQL. */
function postgresOnly(db) {
  test('the database\'s own checks answer with the same errors', async () => {
    const d = db();
    await d.begin();
    try {
      await d.query("SET LOCAL courier.max_payload_bytes = '10'");
      await assert.rejects(write(d.tx, new Message('orders', 'k', 'T', 'x'.repeat(11))), (err) => {
        assert.ok(err instanceof ValidationError, err.stack);
        assert.equal(err.message, "outbox: courier: message.Payload is 11 bytes, over the limit of 10: store large data elsewhere and send a reference, or raise the limit together with the broker's");
        assert.deepEqual([err.field, err.problem], ['Payload', 'is 11 bytes, over the limit of 10']);
        return true;
      });
    } finally {
      await d.rollback();
    }
  });

  test('limits given to write reach the database\'s checks', async () => {
    const d = db();
    await d.begin();
    await write(d.tx, new Message('orders', 'k', 'T', Buffer.alloc((1 << 20) + 1)), { limits: { maxPayloadBytes: 2 << 20 } });
    await d.commit();
    assert.equal((await d.rows('courier_outbox'))[0].payload.length, (1 << 20) + 1);
  });

  test('a committed write wakes a waiting relay', { timeout: 20000 }, async () => {
    const d = db();
    const pg = require('pg');
    const listener = new pg.Client({ connectionString: process.env.COURIER_NODE_POSTGRES_URL });
    await listener.connect();
    try {
      // A waiting relay listens on the outbox's channel and holds the
      // advisory lock whose shared try, in the wake-up trigger's WHEN
      // clause, then fails (migration 0005).
      const [{ channel }] = await d.query("SELECT 'courier_outbox_' || 'courier_outbox'::regclass::oid::text AS channel");
      await listener.query(`LISTEN "${channel}"`);
      await listener.query("SELECT pg_advisory_lock((1668248946::bigint << 32) | 'courier_outbox'::regclass::oid::bigint)");
      const woken = new Promise((resolve) => listener.once('notification', resolve));
      await d.begin();
      await write(d.tx, samples()[0].message);
      await d.commit();
      assert.equal((await woken).channel, channel);
    } finally {
      await listener.end();
    }
  });
}
