'use strict';

// The package's API around the checks: messages' defaults, ids, types,
// the synchronous SQLite calls and the errors that are not the contract's.

const test = require('node:test');
const assert = require('node:assert/strict');
const Database = require('better-sqlite3');
const outbox = require('..');
const { sqliteMigrated } = require('./contract');

const { Message, write, writeSync, scheduleSync } = outbox;

test('the payload gives the content type', () => {
  const cases = [
    [Buffer.from([1, 2]), [1, 2], 'application/octet-stream'],
    [new Uint8Array([3]), [3], 'application/octet-stream'],
    ['é', [0xc3, 0xa9], 'application/octet-stream'],
    [{ a: [1] }, [...Buffer.from('{"a":[1]}')], 'application/json'],
    [[1], [...Buffer.from('[1]')], 'application/json'],
    [null, [], 'application/octet-stream'],
  ];
  for (const [payload, bytes, ct] of cases) {
    const m = new Message('t', 'k', 'T', payload);
    assert.deepEqual([...m.payload], bytes);
    assert.equal(m.contentType, ct);
  }
  assert.equal(new Message('t', 'k', 'T', {}, { contentType: 'application/cloudevents+json' }).contentType, 'application/cloudevents+json');
  assert.equal(new Message('t', 'k', 'T', null).version, 1);
});

test('ids are UUIDv7s in the order they were made', () => {
  let last = '';
  for (let i = 0; i < 20000; i++) {
    const id = outbox.uuidv7();
    assert.match(id, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.ok(id > last, `${id} after ${last}`);
    last = id;
  }
  const ms = parseInt(last.replace(/-/g, '').slice(0, 12), 16);
  assert.ok(Math.abs(ms - Date.now()) < 60000, `the id's time ${ms} is not about now`);
});

test('writeSync writes in a better-sqlite3 transaction, which rolls back with it', () => {
  const db = sqliteMigrated(Database);
  db.exec('CREATE TABLE orders (id TEXT PRIMARY KEY)');
  const place = db.transaction((id, fail) => {
    db.prepare('INSERT INTO orders (id) VALUES (?)').run(id);
    writeSync(db, new Message('orders', id, 'OrderPlaced', { id }));
    if (fail) throw new Error('payment declined');
  });
  place('order-1', false);
  assert.throws(() => place('order-2', true), /payment declined/);
  assert.deepEqual(db.prepare('SELECT ordering_key FROM courier_outbox').all(), [{ ordering_key: 'order-1' }]);
  assert.deepEqual(db.prepare('SELECT id FROM orders').all(), [{ id: 'order-1' }]);
  assert.throws(() => scheduleSync(db, { afterMs: 1000 }, new Message('orders', 'order-1', 'Reminder', null)), {
    name: 'TypeError',
    message: "outbox: the connection commits each statement by itself (autocommit), so the messages would not be part of your transaction: " +
      "begin one first (writeSync inside db.transaction(…), or db.exec('BEGIN IMMEDIATE'))",
  });
  db.transaction(() => scheduleSync(db, { afterMs: 1000 }, new Message('orders', 'order-1', 'Reminder', null)))();
  const row = db.prepare('SELECT due_at - created_at AS after FROM courier_outbox_scheduled').get();
  assert.equal(row.after, 1000000);
});

test('a field of the wrong type is a TypeError naming it', async () => {
  const db = sqliteMigrated(Database);
  const cases = [
    [new Message('t', 42, 'T', null), /message\.key must be a string, not number 42/],
    [new Message('t', 'k', 'T', null, { headers: { a: 1 } }), /message\.headers\["a"\] must be a string/],
    [new Message('t', 'k', 'T', null, { id: 'order-42' }), /message\.id must be UUID text/],
    [new Message('t', 'k', 'T', null, { version: 1.5 }), /message\.version must be an integer/],
    [new Message('t', 'k', 'T', null, { occurredAt: 'yesterday' }), /message\.occurredAt "yesterday" is not RFC 3339/],
    [{ topic: 't' }, /expected a Message/],
    [new Message('t', 'k', 'T', null, { headers: [['a', 'b']] }), /message\.headers must be an object \(or a Map\) of strings, not an array/],
    [new Message('t', 'k', 'T', null, { headers: new Date() }), /message\.headers must be an object/],
  ];
  for (const [m, want] of cases) {
    await assert.rejects(write(db, m), (err) => err instanceof TypeError && want.test(err.message) && err.message.startsWith('outbox: '));
  }
  assert.throws(() => new Message('t', 'k', 'T', null, { header: {} }), /unknown message option header/);
  await assert.rejects(write({}, new Message('t', 'k', 'T', null)), { name: 'TypeError', message: /must be a pg Client/ });
  await assert.rejects(write(db, new Message('t', 'k', 'T', null), { limit: 1 }), /unknown option limit/);
  assert.throws(() => writeSync({}, new Message('t', 'k', 'T', null)), /writeSync takes a better-sqlite3 Database/);
  assert.equal(db.prepare('SELECT count(*) AS n FROM courier_outbox').get().n, 0);
});

test('a database without Courier\'s tables says to migrate', async () => {
  const db = new Database(':memory:');
  db.exec('BEGIN');
  await assert.rejects(write(db, new Message('t', 'k', 'T', null)), (err) => {
    assert.match(err.message, /^sqlite: insert 1 outbox messages: no such table: courier_outbox .*create Courier's tables first: run `courier migrate`$/);
    assert.ok(err.cause instanceof Error);
    return true;
  });
});

test('the README\'s error', async () => {
  const db = sqliteMigrated(Database);
  const ok = new Message('orders', 'order-42', 'OrderPlaced', '');
  await assert.rejects(write(db, ok, new Message('orders', 'order-42', 'OrderPlaced', '', { headers: { Host: 'x' } })), {
    message: 'outbox: message 2 of 2: courier: message.Headers["Host"] is a name HTTP acts on (credentials, routing, framing or a webhook signature): ' +
      'choose another name; sent as a webhook\'s request header it would change how the request is authenticated, routed or read',
    field: 'Headers["Host"]',
    index: 2,
    count: 2,
  });
});

test('headers may be a Map', () => {
  const db = sqliteMigrated(Database);
  db.transaction(() => writeSync(db, new Message('t', 'k', 'T', null, { headers: new Map([['b', '2'], ['a', '1']]) })))();
  assert.equal(db.prepare('SELECT headers FROM courier_outbox').get().headers, '{"a":"1","b":"2"}');
});

test('headers are stored as Go encodes them', () => {
  // Go: json.Marshal(map[string]string{…}) of the same headers.
  const db = sqliteMigrated(Database);
  db.transaction(() => writeSync(db, new Message('t', 'k', 'T', null, { headers: { b: '\x01\x08\x0c\t\x7f\u2028\u2029<>&"\\ é😀\u00a0\ufeff', a: '', Z: "'/" } })))();
  assert.equal(db.prepare('SELECT headers FROM courier_outbox').get().headers,
    '{"Z":"\'/","a":"","b":"\\u0001\\b\\f\\t\x7f\\u2028\\u2029\\u003c\\u003e\\u0026\\"\\\\ é😀\u00a0\ufeff"}');
});
