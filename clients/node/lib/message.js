'use strict';

const { randomBytes } = require('node:crypto');
const { ZERO_TIME_MICROS } = require('./validate');

const CONTENT_TYPE_JSON = 'application/json';
const CONTENT_TYPE_BINARY = 'application/octet-stream';

/**
 * Message is one message for the outbox, as Go's courier.Message:
 *
 *   new Message('orders', 'order-42', 'OrderPlaced', {total: 42})
 *   new Message('orders', 'order-42', 'OrderPlaced', buf, {headers: {traceparent: tp}})
 *
 * The payload is a Buffer or Uint8Array (its bytes, content type
 * application/octet-stream), a string (its UTF-8 bytes,
 * application/octet-stream), or any other value, which is encoded as JSON
 * (application/json); null or undefined is an empty payload. options may
 * set headers (an object or Map of strings), id (UUID text; default a new
 * UUIDv7), version (default 1), contentType (overrides the payload's) and
 * occurredAt (a Date, or RFC 3339 text to keep microseconds; default
 * now). The constructor does not validate: write and schedule do.
 */
class Message {
  constructor(topic, key, type, payload, options = {}) {
    const { headers = null, id = null, version = 1, contentType = null, occurredAt = null, ...rest } = options;
    const unknown = Object.keys(rest);
    if (unknown.length > 0) {
      throw new TypeError(`courier: unknown message option ${unknown[0]}: use headers, id, version, contentType or occurredAt`);
    }
    const [bytes, ct] = encodePayload(payload);
    this.id = id === null ? uuidv7() : id;
    this.topic = topic;
    this.key = key;
    this.type = type;
    this.version = version;
    this.contentType = contentType === null ? ct : contentType;
    this.payload = bytes;
    this.headers = headers;
    this.occurredAt = occurredAt === null ? new Date() : occurredAt;
  }
}

/** encodePayload returns the payload's bytes and the content type they imply. */
function encodePayload(payload) {
  if (payload === null || payload === undefined) return [Buffer.alloc(0), CONTENT_TYPE_BINARY];
  if (Buffer.isBuffer(payload)) return [payload, CONTENT_TYPE_BINARY];
  if (payload instanceof Uint8Array) return [Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength), CONTENT_TYPE_BINARY];
  if (typeof payload === 'string') return [Buffer.from(payload, 'utf8'), CONTENT_TYPE_BINARY];
  const json = JSON.stringify(payload);
  if (json === undefined) throw new TypeError(`courier: a payload of type ${typeof payload} does not encode as JSON: pass a Buffer, a string or a JSON value`);
  return [Buffer.from(json, 'utf8'), CONTENT_TYPE_JSON];
}

let lastMillis = 0;
let sequence = 0;

/**
 * uuidv7 returns a new UUIDv7 (RFC 9562): 48 bits of Unix milliseconds,
 * then 12 bits that count up within a millisecond (so that this process's
 * ids sort in the order they were made), then 62 random bits.
 */
function uuidv7() {
  let ms = Date.now();
  if (ms > lastMillis) {
    lastMillis = ms;
    sequence = randomBytes(2).readUInt16BE(0) & 0x7ff;
  } else {
    sequence++;
    if (sequence > 0xfff) {
      lastMillis++;
      sequence = 0;
    }
    ms = lastMillis;
  }
  const b = randomBytes(16);
  b.writeUIntBE(ms, 0, 6);
  b[6] = 0x70 | (sequence >> 8);
  b[7] = sequence & 0xff;
  b[8] = 0x80 | (b[8] & 0x3f);
  const h = b.toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

const UUID_TEXT = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;
const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:([Zz])|([+-])(\d{2}):(\d{2}))$/;

/**
 * micros returns t, a Date or RFC 3339 text, as microseconds since the
 * Unix epoch (a BigInt; digits past the microsecond are dropped, as Go's
 * drivers drop them), or throws a TypeError naming what.
 */
function micros(t, what) {
  if (t instanceof Date) {
    const ms = t.getTime();
    if (Number.isNaN(ms)) throw new TypeError(`courier: ${what} is an invalid Date`);
    return BigInt(ms) * 1000n;
  }
  if (typeof t === 'string') {
    const p = RFC3339.exec(t);
    if (p) {
      const [, y, mo, d, h, mi, s, frac = '', z, sign, oh, om] = p;
      const date = new Date(0);
      date.setUTCFullYear(Number(y), Number(mo) - 1, Number(d));
      date.setUTCHours(Number(h), Number(mi), Number(s), 0);
      let us = BigInt(date.getTime()) * 1000n + BigInt((frac + '000000').slice(0, 6));
      if (!z) us -= (sign === '-' ? -1n : 1n) * BigInt(Number(oh) * 60 + Number(om)) * 60000000n;
      if (date.getUTCMonth() === Number(mo) - 1 && date.getUTCDate() === Number(d) && Number(h) < 24 && Number(mi) < 60 && Number(s) < 60) {
        return us;
      }
    }
    throw new TypeError(`courier: ${what} ${JSON.stringify(t)} is not RFC 3339 time text such as "2026-01-02T03:04:05.123456Z"`);
  }
  throw new TypeError(`courier: ${what} must be a Date or RFC 3339 text, not ${describe(t)}`);
}

/**
 * normalize checks the types of m's fields and returns the plain record
 * the checks and the dialects read: id as lower-case UUID text, the
 * payload as a Buffer, headers as an object (null when there are none),
 * occurredAtMicros a BigInt. A field of the wrong type is a TypeError
 * naming it; values are checked by validate.check.
 */
function normalize(m) {
  if (!(m instanceof Message)) {
    throw new TypeError(`courier: expected a Message (new Message(topic, key, type, payload, options)), not ${describe(m)}`);
  }
  for (const f of ['topic', 'key', 'type', 'contentType']) {
    if (typeof m[f] !== 'string') throw new TypeError(`courier: message.${f} must be a string, not ${describe(m[f])}`);
  }
  if (typeof m.id !== 'string' || !UUID_TEXT.test(m.id)) {
    throw new TypeError(`courier: message.id must be UUID text such as "0192f3a4-0000-7000-8000-000000000001", not ${describe(m.id)}`);
  }
  if (!Number.isSafeInteger(m.version)) throw new TypeError(`courier: message.version must be an integer, not ${describe(m.version)}`);
  if (!(m.payload instanceof Uint8Array)) throw new TypeError(`courier: message.payload must be a Buffer, not ${describe(m.payload)}`);
  let headers = null;
  if (m.headers !== null && m.headers !== undefined) {
    const given = m.headers instanceof Map ? Object.fromEntries(m.headers) : m.headers;
    const proto = typeof given === 'object' ? Object.getPrototypeOf(given) : undefined;
    if (proto !== Object.prototype && proto !== null) {
      throw new TypeError(`courier: message.headers must be an object (or a Map) of strings, not ${describe(m.headers)}`);
    }
    for (const [name, value] of Object.entries(given)) {
      if (typeof value !== 'string') throw new TypeError(`courier: message.headers[${JSON.stringify(name)}] must be a string, not ${describe(value)}`);
    }
    if (Object.keys(given).length > 0) headers = given;
  }
  return {
    id: m.id.toLowerCase(),
    topic: m.topic,
    key: m.key,
    type: m.type,
    version: m.version,
    contentType: m.contentType,
    payload: Buffer.isBuffer(m.payload) ? m.payload : Buffer.from(m.payload.buffer, m.payload.byteOffset, m.payload.byteLength),
    headers,
    occurredAtMicros: micros(m.occurredAt, 'message.occurredAt'),
  };
}

/** describe names a value's type for an error. */
function describe(v) {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'object') return `a ${v.constructor ? v.constructor.name : 'object'}`;
  if (typeof v === 'string') return `the string ${JSON.stringify(v.length > 40 ? v.slice(0, 40) + '…' : v)}`;
  return `${typeof v} ${String(v)}`;
}

/** formatMicros renders us (a BigInt) as RFC 3339 text in UTC with six fractional digits. */
function formatMicros(us, sep = 'T', zone = 'Z') {
  let ms = us / 1000n;
  let rest = us % 1000n;
  if (rest < 0n) {
    rest += 1000n;
    ms -= 1n;
  }
  const d = new Date(Number(ms));
  const pad = (n, w = 2) => String(n).padStart(w, '0');
  return `${pad(d.getUTCFullYear(), 4)}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())}${sep}` +
    `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}.` +
    `${pad(d.getUTCMilliseconds(), 3)}${pad(Number(rest), 3)}${zone}`;
}

/** nowMicros is the process's clock in microseconds since the Unix epoch. */
function nowMicros() {
  return BigInt(Date.now()) * 1000n;
}

module.exports = { Message, uuidv7, normalize, micros, formatMicros, nowMicros, ZERO_TIME_MICROS, CONTENT_TYPE_JSON, CONTENT_TYPE_BINARY };
