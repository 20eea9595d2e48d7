'use strict';

// The checks of Courier's outbox contract, version 1 (docs/contract.md):
// the same checks, in the same order and with the same texts, as the Go
// module's Message.Validate. The vectors in testdata/contract/v1, which
// the Go tests generate, hold this file to them.

/** Default and fixed limits of the contract. */
const DEFAULT_MAX_PAYLOAD_BYTES = 1 << 20;
const DEFAULT_MAX_HEADER_BYTES = 64 << 10;
const MAX_NAME_BYTES = 255;
const MAX_KEY_BYTES = 1024;

const NIL_UUID = '00000000-0000-0000-0000-000000000000';

/**
 * ValidationError says which field of a message is wrong, what is wrong
 * with it and how to fix it. Its message is exactly the Go Writer's
 * error: "outbox: courier: message.Topic is empty: set a topic such as
 * \"orders\"", with "message I of N: " after "outbox: " when a call wrote
 * several messages.
 */
class ValidationError extends Error {
  constructor(field, problem, fix, prefix = '') {
    super(prefix + text(field, problem, fix));
    this.name = 'ValidationError';
    /** The offending field, as Go names it: "Topic", "Headers[\"x-a\"]". */
    this.field = field;
    /** What is wrong with it: "is empty". */
    this.problem = problem;
    /** What to do about it. */
    this.fix = fix;
    /** The message's place among those of the call, from 1. */
    this.index = 1;
    /** How many messages the call wrote. */
    this.count = 1;
  }
}

/** text is the Go ValidationError's Error(). */
function text(field, problem, fix) {
  const head = `courier: message.${field} ${problem}`;
  return fix ? `${head}: ${fix}` : head;
}

/**
 * check returns the first ValidationError of m (a normalized message:
 * see message.js) under limits, or null: Go's Validate order is ID,
 * Topic, Key, Type, Version, ContentType, Payload, OccurredAt, each
 * header (name, then value) by name in bytewise order, then the headers'
 * total size.
 */
function check(m, limits) {
  const maxPayload = limits && limits.maxPayloadBytes > 0 ? limits.maxPayloadBytes : DEFAULT_MAX_PAYLOAD_BYTES;
  const maxHeaders = limits && limits.maxHeaderBytes > 0 ? limits.maxHeaderBytes : DEFAULT_MAX_HEADER_BYTES;
  if (m.id === NIL_UUID) {
    return new ValidationError('ID', 'is the nil UUID', 'build messages with courier.NewMessage or courier.NewJSON, which set a UUIDv7');
  }
  const named = checkName('Topic', m.topic, MAX_NAME_BYTES, false, 'set a topic such as "orders"') ||
    checkName('Key', m.key, MAX_KEY_BYTES, true, 'set the ordering key, usually the aggregate id such as "order-42"') ||
    checkName('Type', m.type, MAX_NAME_BYTES, false, 'set the message type such as "OrderPlaced"');
  if (named) return named;
  if (m.version < 1) {
    return new ValidationError('Version', `is ${m.version}`, 'use 1 or more (courier.WithVersion)');
  }
  const ct = checkName('ContentType', m.contentType, MAX_NAME_BYTES, true, 'set a media type such as "application/json"');
  if (ct) return ct;
  if (m.payload.length > maxPayload) {
    return new ValidationError('Payload', `is ${m.payload.length} bytes, over the limit of ${maxPayload}`,
      "store large data elsewhere and send a reference, or raise the limit together with the broker's");
  }
  if (m.occurredAtMicros === ZERO_TIME_MICROS) {
    return new ValidationError('OccurredAt', 'is not set', 'set when the event happened (courier.WithOccurredAt)');
  }
  let size = 0;
  for (const name of sortedNames(m.headers)) {
    const value = m.headers[name];
    size += Buffer.byteLength(name) + Buffer.byteLength(value);
    const bad = checkHeaderName(name);
    if (bad) return bad;
    if (!value.isWellFormed() || /[\r\n\0]/.test(value)) {
      return new ValidationError(headerField(name), 'has a line break, NUL or invalid UTF-8 in its value',
        'encode the value (for example base64) or remove the offending characters');
    }
  }
  if (size > maxHeaders) {
    return new ValidationError('Headers', `total ${size} bytes, over the limit of ${maxHeaders}`, 'move bulky metadata into the payload');
  }
  return null;
}

/** The microseconds since the Unix epoch of Go's zero time, 0001-01-01T00:00:00Z. */
const ZERO_TIME_MICROS = -62135596800000000n;

/**
 * checkName is Go's checkName: set, at most maxBytes long, UTF-8, without
 * control characters (Unicode's Cc) and, unless spaces, without white
 * space (Unicode's White_Space).
 */
function checkName(field, s, maxBytes, spaces, fix) {
  if (s === '') return new ValidationError(field, 'is empty', fix);
  const n = Buffer.byteLength(s);
  if (n > maxBytes) return new ValidationError(field, `is ${n} bytes, over the limit of ${maxBytes}`, 'shorten it');
  if (!s.isWellFormed()) return new ValidationError(field, 'is not valid UTF-8', 'use UTF-8 text');
  for (const ch of s) {
    const r = ch.codePointAt(0);
    // A character that is both, such as a tab, is a control character.
    const what = isControl(r) ? 'a control character' : !spaces && isSpace(r) ? 'white space' : '';
    if (what) return new ValidationError(field, `contains ${what} (U+${r.toString(16).toUpperCase().padStart(4, '0')})`, 'remove it');
  }
  return null;
}

/** isControl is Go's unicode.IsControl: C0, DEL and C1. */
function isControl(r) {
  return r < 0x20 || (r >= 0x7f && r <= 0x9f);
}

/** isSpace is Go's unicode.IsSpace: Unicode's White_Space property. */
function isSpace(r) {
  switch (r) {
    case 0x09: case 0x0a: case 0x0b: case 0x0c: case 0x0d: case 0x20: case 0x85: case 0xa0:
    case 0x1680: case 0x2028: case 0x2029: case 0x202f: case 0x205f: case 0x3000:
      return true;
  }
  return r >= 0x2000 && r <= 0x200a;
}

const TOKEN = /^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$/;

const HTTP_PREFIXES = ['proxy-', 'x-forwarded-', 'content-', 'sec-', 'webhook-', 'if-'];
const HTTP_NAMES = new Set([
  'authorization', 'www-authenticate', 'cookie', 'cookie2', 'set-cookie', 'set-cookie2',
  'host', 'forwarded', 'via', 'max-forwards', 'origin', 'x-real-ip',
  'x-http-method', 'x-http-method-override', 'x-method-override', 'x-original-url', 'x-rewrite-url',
  'connection', 'keep-alive', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'expect', 'range',
  'accept-encoding',
]);

/**
 * checkHeaderName is Go's CheckHeaderName: an HTTP token that no broker
 * or HTTP hop acts on (Courier-Correlation-Id and Courier-Causation-Id
 * excepted), compared without regard to case.
 */
function checkHeaderName(name) {
  const field = headerField(name);
  if (!TOKEN.test(name)) {
    return new ValidationError(field, 'is not a valid header name', "use letters, digits and !#$%&'*+-.^_`|~ only, no spaces or colons");
  }
  if (name === 'Courier-Correlation-Id' || name === 'Courier-Causation-Id') return null;
  const lower = name.toLowerCase();
  if (lower.startsWith('courier-') || lower.startsWith('nats-')) {
    return new ValidationError(field, 'uses a reserved prefix (Courier-, Nats-)',
      'choose another name; Courier sets these headers itself and brokers act on them');
  }
  if (HTTP_PREFIXES.some((p) => lower.startsWith(p)) || HTTP_NAMES.has(lower)) {
    return new ValidationError(field, 'is a name HTTP acts on (credentials, routing, framing or a webhook signature)',
      'choose another name; sent as a webhook\'s request header it would change how the request is authenticated, routed or read');
  }
  return null;
}

/**
 * headerField names a header in an error the contract's way:
 * Headers["name"], the name's UTF-8 bytes 0x20 to 0x7E as they are
 * (but " and \ escaped with \), every other byte as \xHH.
 */
function headerField(name) {
  let q = '';
  for (const b of Buffer.from(name, 'utf8')) {
    if (b === 0x22 || b === 0x5c) q += '\\' + String.fromCharCode(b);
    else if (b >= 0x20 && b <= 0x7e) q += String.fromCharCode(b);
    else q += '\\x' + b.toString(16).padStart(2, '0');
  }
  return `Headers["${q}"]`;
}

/** sortedNames returns the names of headers sorted by their UTF-8 bytes. */
function sortedNames(headers) {
  if (!headers) return [];
  return Object.keys(headers).sort((a, b) => Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8')));
}

module.exports = {
  ValidationError,
  check,
  checkHeaderName,
  sortedNames,
  ZERO_TIME_MICROS,
  NIL_UUID,
  DEFAULT_MAX_PAYLOAD_BYTES,
  DEFAULT_MAX_HEADER_BYTES,
};
