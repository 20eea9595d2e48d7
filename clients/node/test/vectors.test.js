'use strict';

// Every case of the contract's vectors (testdata/contract/v1/messages.json)
// on an in-memory SQLite database, where the checks are this package's
// alone: valid messages are written, invalid ones and batches holding one
// get the Go Writer's errors, field, problem and fix, and write nothing.

const test = require('node:test');
const assert = require('node:assert/strict');
const Database = require('better-sqlite3');
const { ValidationError, writeSync, validate, checkHeaderName } = require('..');
const contract = require('./contract');

const vectors = contract.vectors();

/** refuses asserts that writing v's messages fails with v's error and writes nothing. */
function refuses(db, v) {
  assert.throws(() => writeSync(db, ...contract.messagesOf(v), contract.optionsOf(v)), (err) => {
    assert.ok(err instanceof ValidationError, `${v.name}: ${err.stack}`);
    assert.equal(err.message, v.error.writer, v.name);
    assert.deepEqual({ field: err.field, problem: err.problem, fix: err.fix }, { field: v.error.field, problem: v.error.problem, fix: v.error.fix }, v.name);
    assert.equal(err.index, v.index || 1, v.name);
    return true;
  });
  assert.equal(db.prepare('SELECT count(*) AS n FROM courier_outbox').get().n, 0, v.name);
}

test('every valid vector is written', () => {
  const db = contract.sqliteMigrated(Database);
  const valid = vectors.valid.filter(contract.forNode);
  assert.ok(valid.length > 0);
  for (const v of valid) {
    const msgs = contract.messagesOf(v);
    assert.deepEqual(db.transaction(() => writeSync(db, ...msgs, contract.optionsOf(v)))(), msgs.map((m) => m.id), v.name);
  }
  assert.equal(db.prepare('SELECT count(*) AS n FROM courier_outbox').get().n, valid.length);
});

test('every invalid vector gets the Go Writer\'s error', () => {
  const db = contract.sqliteMigrated(Database);
  const invalid = vectors.invalid.filter(contract.forNode);
  assert.ok(invalid.length > 0);
  for (const v of invalid) refuses(db, v);
});

test('a batch is refused at its first invalid message, by its place', () => {
  const db = contract.sqliteMigrated(Database);
  assert.ok(vectors.batches.length > 0);
  for (const v of vectors.batches.filter(contract.forNode)) refuses(db, v);
});

test('the vectors Node cannot express say why', () => {
  for (const v of [...vectors.valid, ...vectors.invalid, ...vectors.batches].filter((v) => !contract.forNode(v))) {
    assert.ok(v.why, `${v.name} is not_in node without a why`);
  }
});

test('validate gives each invalid vector\'s ValidationError text, and checkHeaderName a header\'s', () => {
  for (const v of vectors.invalid.filter(contract.forNode)) {
    const [m] = contract.messagesOf(v);
    assert.throws(() => validate(m, contract.optionsOf(v)), { name: 'ValidationError', message: v.error.error, field: v.error.field }, v.name);
    if (v.error.field.startsWith('Headers[') && v.error.problem !== 'has a line break, NUL or invalid UTF-8 in its value') {
      // The first bad name in bytewise order is the one named.
      const names = Object.keys(m.headers).sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
      assert.throws(() => names.forEach(checkHeaderName), { message: v.error.error }, v.name);
    }
  }
  for (const v of vectors.valid.filter(contract.forNode)) {
    for (const m of contract.messagesOf(v)) validate(m);
  }
  checkHeaderName('Courier-Correlation-Id');
});
