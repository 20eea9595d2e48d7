'use strict';

// The checks' texts for cases written here; test/vectors.test.js runs
// every case of the contract's vectors.

const test = require('node:test');
const assert = require('node:assert/strict');
const Database = require('better-sqlite3');
const { Message, ValidationError, writeSync } = require('..');
const { sqliteMigrated } = require('./contract');

const AT = '2026-01-02T03:04:05.123456Z';

function msg(over = {}) {
  const { topic = 'orders', key = 'order-42', type = 'OrderPlaced', payload = '{}', ...options } = over;
  return new Message(topic, key, type, payload, { occurredAt: AT, ...options });
}

function refused(m, writer, field) {
  const db = sqliteMigrated(Database);
  assert.throws(() => writeSync(db, ...(Array.isArray(m) ? m : [m])), (err) => {
    assert.ok(err instanceof ValidationError, `${err}`);
    assert.equal(err.message, writer);
    assert.equal(err.field, field);
    return true;
  });
  assert.equal(db.prepare('SELECT count(*) AS n FROM courier_outbox').get().n, 0);
}

test('each check names the field, the problem and the fix', () => {
  refused(msg({ topic: '' }), 'outbox: courier: message.Topic is empty: set a topic such as "orders"', 'Topic');
  refused(msg({ topic: 'a b' }), 'outbox: courier: message.Topic contains white space (U+0020): remove it', 'Topic');
  refused(msg({ key: 'a\tb' }), 'outbox: courier: message.Key contains a control character (U+0009): remove it', 'Key');
  refused(msg({ topic: 'a\u0085b' }), 'outbox: courier: message.Topic contains a control character (U+0085): remove it', 'Topic');
  refused(msg({ topic: 'a\u00a0b' }), 'outbox: courier: message.Topic contains white space (U+00A0): remove it', 'Topic');
  refused(msg({ key: 'a\u0001b' }), 'outbox: courier: message.Key contains a control character (U+0001): remove it', 'Key');
  refused(msg({ type: 'x\u3000' }), 'outbox: courier: message.Type contains white space (U+3000): remove it', 'Type');
  refused(msg({ type: 'x\ud800' }), 'outbox: courier: message.Type is not valid UTF-8: use UTF-8 text', 'Type');
  refused(msg({ topic: 'é'.repeat(128) }), 'outbox: courier: message.Topic is 256 bytes, over the limit of 255: shorten it', 'Topic');
  refused(msg({ version: 0 }), 'outbox: courier: message.Version is 0: use 1 or more (courier.WithVersion)', 'Version');
  refused(msg({ id: '00000000-0000-0000-0000-000000000000' }),
    'outbox: courier: message.ID is the nil UUID: build messages with courier.NewMessage or courier.NewJSON, which set a UUIDv7', 'ID');
  refused(msg({ occurredAt: '0001-01-01T00:00:00Z' }),
    'outbox: courier: message.OccurredAt is not set: set when the event happened (courier.WithOccurredAt)', 'OccurredAt');
  refused(msg({ payload: Buffer.alloc((1 << 20) + 1) }),
    "outbox: courier: message.Payload is 1048577 bytes, over the limit of 1048576: store large data elsewhere and send a reference, or raise the limit together with the broker's", 'Payload');
});

test('headers are checked in the bytewise order of their names, then their total size', () => {
  refused(msg({ headers: { 'z z': 'v', 'Nats-Rollup': 'all', 'a\u00e9"\\': 'v' } }),
    'outbox: courier: message.Headers["Nats-Rollup"] uses a reserved prefix (Courier-, Nats-): choose another name; Courier sets these headers itself and brokers act on them',
    'Headers["Nats-Rollup"]');
  refused(msg({ headers: { 'z z': 'v', 'a\u00e9"\\': 'v' } }),
    'outbox: courier: message.Headers["a\\xc3\\xa9\\"\\\\"] is not a valid header name: use letters, digits and !#$%&\'*+-.^_`|~ only, no spaces or colons',
    'Headers["a\\xc3\\xa9\\"\\\\"]');
  refused(msg({ headers: { 'X-Forwarded-For': '1' } }),
    'outbox: courier: message.Headers["X-Forwarded-For"] is a name HTTP acts on (credentials, routing, framing or a webhook signature): choose another name; sent as a webhook\'s request header it would change how the request is authenticated, routed or read',
    'Headers["X-Forwarded-For"]');
  refused(msg({ headers: { a: 'x\r\ny' } }),
    'outbox: courier: message.Headers["a"] has a line break, NUL or invalid UTF-8 in its value: encode the value (for example base64) or remove the offending characters',
    'Headers["a"]');
  refused(msg({ headers: { a: 'x'.repeat(65536) } }),
    'outbox: courier: message.Headers total 65537 bytes, over the limit of 65536: move bulky metadata into the payload', 'Headers');
});

test('the first invalid message of several is named by its place', () => {
  refused([msg(), msg({ key: '' }), msg({ topic: '' })],
    'outbox: message 2 of 3: courier: message.Key is empty: set the ordering key, usually the aggregate id such as "order-42"', 'Key');
  assert.throws(() => writeSync(sqliteMigrated(Database), msg(), msg(), msg({ version: -1 })), { index: 3, count: 3, problem: 'is -1' });
});

test('Courier-Correlation-Id and Courier-Causation-Id are the message\'s own', () => {
  const db = sqliteMigrated(Database);
  db.transaction(() => writeSync(db, msg({ headers: { 'Courier-Correlation-Id': 'c', 'Courier-Causation-Id': 'd' } })))();
  assert.equal(db.prepare('SELECT headers FROM courier_outbox').get().headers, '{"Courier-Causation-Id":"d","Courier-Correlation-Id":"c"}');
});

test('limits raise or lower the payload and header bounds', () => {
  const db = sqliteMigrated(Database);
  db.transaction(() => writeSync(db, msg({ payload: Buffer.alloc(2 << 20) }), { limits: { maxPayloadBytes: 2 << 20 } }))();
  assert.throws(() => writeSync(db, msg({ headers: { a: 'bc' } }), { limits: { maxHeaderBytes: 2 } }),
    { message: 'outbox: courier: message.Headers total 3 bytes, over the limit of 2: move bulky metadata into the payload' });
});
