'use strict';

const { ValidationError, check, checkHeaderName: headerNameError, ZERO_TIME_MICROS } = require('./validate');
const { Message, normalize, micros } = require('./message');
const postgres = require('./postgres');
const mysql = require('./mysql');
const sqlite = require('./sqlite');

const DIALECTS = [postgres, mysql, sqlite];

/**
 * write validates messages and adds them to the outbox in tx, the
 * caller's open transaction, in the order given: a pg Client or
 * PoolClient, a mysql2 connection (callback or promise), or a
 * better-sqlite3 Database. Nothing is written when any message is
 * invalid: it rejects with a ValidationError whose message is the Go
 * Writer's ("outbox: courier: message.Topic is empty: …"). An options
 * object may follow the messages: {limits: {maxPayloadBytes,
 * maxHeaderBytes}} (0 or absent: 1 MiB and 64 KiB). It resolves to the
 * messages' ids. Writing no messages does nothing.
 */
async function write(tx, ...rest) {
  const [msgs, options] = split(rest);
  const dialect = dialectOf(tx);
  const rows = prepare(msgs, options.limits);
  if (rows.length > 0) await inTransaction(dialect, tx).insert(tx, rows, options.limits, null);
  return rows.map((r) => r.id);
}

/**
 * schedule is write for messages to be published at or after due: a Date
 * (or RFC 3339 text) for a moment, or {afterMs: N} for N milliseconds
 * after the statement runs by the database's clock (on SQLite, this
 * process's), as Go's outbox.At and outbox.After. A scheduled message
 * occurs at its due time, and keeps its id, so Go's Writer.Cancel can
 * cancel it.
 */
async function schedule(tx, due, ...rest) {
  const [msgs, options] = split(rest);
  const dialect = dialectOf(tx);
  const d = dueOf(due);
  const rows = prepare(msgs, options.limits);
  if (rows.length > 0) await inTransaction(dialect, tx).insert(tx, rows, options.limits, d);
  return rows.map((r) => r.id);
}

/**
 * writeSync is write for a better-sqlite3 Database, whose transactions
 * are synchronous: call it inside db.transaction(…). It throws what
 * write rejects with and returns the ids.
 */
function writeSync(db, ...rest) {
  const [msgs, options] = split(rest);
  sqliteOnly(db, 'writeSync');
  const rows = prepare(msgs, options.limits);
  if (rows.length > 0) inTransaction(sqlite, db).insertSync(db, rows, options.limits, null);
  return rows.map((r) => r.id);
}

/** scheduleSync is schedule for a better-sqlite3 Database (see writeSync). */
function scheduleSync(db, due, ...rest) {
  const [msgs, options] = split(rest);
  sqliteOnly(db, 'scheduleSync');
  const d = dueOf(due);
  const rows = prepare(msgs, options.limits);
  if (rows.length > 0) inTransaction(sqlite, db).insertSync(db, rows, options.limits, d);
  return rows.map((r) => r.id);
}

function sqliteOnly(db, name) {
  if (!sqlite.isClient(db)) {
    throw new TypeError(`outbox: ${name} takes a better-sqlite3 Database; for pg and mysql2 await ${name.replace('Sync', '')}(tx, …)`);
  }
}

/**
 * inTransaction returns dialect when tx is in a transaction, and throws
 * when it commits each statement by itself: the messages would then not
 * be part of the caller's transaction, nor of each other's.
 */
function inTransaction(dialect, tx) {
  if (dialect.autocommitting(tx)) {
    throw new TypeError('outbox: the connection commits each statement by itself (autocommit), so the messages would not be part of your transaction: ' +
      `begin one first (${dialect.begin})`);
  }
  return dialect;
}

/**
 * validate checks message as write would, without writing it: it throws
 * the ValidationError write would reject with, its message Go's
 * ValidationError's text ("courier: message.Topic is empty: …", without
 * the Writer's "outbox: "), or a TypeError for a field of the wrong type.
 */
function validate(message, options = {}) {
  const bad = check(normalize(message), options.limits);
  if (bad) throw bad;
}

/**
 * checkHeaderName throws the ValidationError of a header named name, as
 * Go's courier.CheckHeaderName returns it, when no message may carry it.
 */
function checkHeaderName(name) {
  if (typeof name !== 'string') throw new TypeError(`courier: a header name must be a string, not ${typeof name}`);
  const bad = headerNameError(name);
  if (bad) throw bad;
}

/** split separates the messages from the options object that may end them. */
function split(rest) {
  const last = rest[rest.length - 1];
  const options = rest.length > 0 && !(last instanceof Message) && last !== null && typeof last === 'object' &&
    !Array.isArray(last) && !('topic' in last); // a message of another kind is refused as one
  if (options) {
    const { limits, ...unknown } = last;
    const names = Object.keys(unknown);
    if (names.length > 0) throw new TypeError(`outbox: unknown option ${names[0]}: the options are {limits: {maxPayloadBytes, maxHeaderBytes}}`);
    return [rest.slice(0, -1), { limits: limits || null }];
  }
  return [rest, { limits: null }];
}

/** dialectOf returns the dialect of tx, or throws naming what tx may be. */
function dialectOf(tx) {
  for (const d of DIALECTS) {
    if (d.isClient(tx)) return d;
  }
  for (const d of DIALECTS) {
    if (d.isPool(tx)) {
      throw new TypeError(`outbox: got a ${d.name === 'postgres' ? 'pg' : 'mysql2'} pool, which holds no transaction: ` +
        'take a client or connection from it, begin a transaction on it and pass that, so that the messages commit with your change');
    }
  }
  throw new TypeError('outbox: the transaction must be a pg Client or PoolClient, a mysql2 connection (callback or promise) ' +
    'or a better-sqlite3 Database, with a transaction begun on it');
}

/**
 * prepare normalizes and checks msgs, naming the message's place among
 * several as Go's Writer does ("outbox: message 2 of 3: courier: …").
 */
function prepare(msgs, limits) {
  const rows = [];
  for (let i = 0; i < msgs.length; i++) {
    const prefix = msgs.length === 1 ? 'outbox: ' : `outbox: message ${i + 1} of ${msgs.length}: `;
    let row;
    try {
      row = normalize(msgs[i]);
    } catch (err) {
      err.message = prefix + err.message;
      throw err;
    }
    const bad = check(row, limits);
    if (bad) {
      const err = new ValidationError(bad.field, bad.problem, bad.fix, prefix);
      [err.index, err.count] = [i + 1, msgs.length];
      throw err;
    }
    rows.push(row);
  }
  return rows;
}

/**
 * dueOf reads a due time: {atMicros} for a Date or RFC 3339 text,
 * {afterMicros} for {afterMs}. A zero due time (Go's zero time, or no
 * delay) is refused, as Go's Writer refuses it.
 */
function dueOf(due) {
  const zero = new RangeError('outbox: schedule: the due time is zero: give a Date or {afterMs: N} with N > 0, or write the messages to publish them at once');
  if (due instanceof Date || typeof due === 'string') {
    const at = micros(due, 'the due time');
    if (at === ZERO_TIME_MICROS) throw zero;
    return { atMicros: at };
  }
  if (due !== null && typeof due === 'object' && 'afterMs' in due) {
    if (typeof due.afterMs !== 'number' || Number.isNaN(due.afterMs)) throw new TypeError('outbox: schedule: afterMs must be a number of milliseconds');
    if (due.afterMs <= 0) throw zero;
    return { afterMicros: BigInt(Math.round(due.afterMs * 1000)) };
  }
  throw new TypeError('outbox: schedule: the due time must be a Date (at) or {afterMs: N} (after N milliseconds)');
}

module.exports = { write, schedule, writeSync, scheduleSync, validate, checkHeaderName };
