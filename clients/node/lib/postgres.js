'use strict';

// PostgreSQL: each message is one call of courier_write or
// courier_schedule (migration 0017), which check it again and insert it,
// firing the relay's wake-up, in the caller's transaction.

const { ValidationError } = require('./validate');
const { headersJSON } = require('./headers');
const { formatMicros } = require('./message');
const { writeError } = require('./schema');

const ARGS = 'p_topic => $1, p_key => $2, p_type => $3, p_payload => $4, p_headers => $5::jsonb, ' +
  'p_content_type => $6, p_version => $7, p_message_id => $8::uuid, p_occurred_at => $9::timestamptz';
const WRITE_SQL = `SELECT courier_write(${ARGS})`;
// The due time is $10, or $11 microseconds after now() (the transaction's
// start, by the database's clock), as Go's scheduler has it.
const SCHEDULE_SQL = `SELECT courier_schedule(p_due_at => coalesce($10::timestamptz, now() + $11::bigint * interval '1 microsecond'), ${ARGS})`;
const LIMITS_SQL = "SELECT set_config('courier.max_payload_bytes', $1, true), set_config('courier.max_header_bytes', $2, true)";

/** isClient reports whether tx is a pg Client or PoolClient. */
function isClient(tx) {
  return tx !== null && typeof tx === 'object' && typeof tx.query === 'function' && 'connectionParameters' in tx;
}

/** isPool reports whether tx is a pg Pool, on which no transaction is held. */
function isPool(tx) {
  return tx !== null && typeof tx === 'object' && typeof tx.connect === 'function' && 'totalCount' in tx;
}

/**
 * autocommitting reports whether tx commits each statement by itself:
 * idle, outside a transaction (pg 8.19 and later say; older ones are
 * trusted).
 */
function autocommitting(tx) {
  return typeof tx.getTransactionStatus === 'function' && tx.getTransactionStatus() === 'I';
}

function args(m) {
  return [m.topic, m.key, m.type, m.payload, headersJSON(m.headers), m.contentType, m.version, m.id, formatMicros(m.occurredAtMicros)];
}

/**
 * insert writes msgs (normalized and checked) in tx, due at due when it is
 * given ({atMicros} or {afterMicros}), under limits. On PostgreSQL the
 * limits, when given, become the transaction's settings
 * courier.max_payload_bytes and courier.max_header_bytes, which the
 * functions read.
 */
async function insert(tx, msgs, limits, due) {
  const what = due ? `schedule ${msgs.length} messages` : `insert ${msgs.length} outbox messages`;
  try {
    if (limits && (limits.maxPayloadBytes > 0 || limits.maxHeaderBytes > 0)) {
      await tx.query(LIMITS_SQL, [String(limits.maxPayloadBytes > 0 ? limits.maxPayloadBytes : 0), String(limits.maxHeaderBytes > 0 ? limits.maxHeaderBytes : 0)]);
    }
    for (let i = 0; i < msgs.length; i++) {
      const a = args(msgs[i]);
      try {
        if (due) {
          await tx.query(SCHEDULE_SQL, [...a, due.atMicros === undefined ? null : formatMicros(due.atMicros), due.afterMicros === undefined ? 0 : String(due.afterMicros)]);
        } else {
          await tx.query(WRITE_SQL, a);
        }
      } catch (err) {
        throw invalid(err, i, msgs.length) || err;
      }
    }
  } catch (err) {
    if (err instanceof ValidationError) throw err;
    throw writeError(err, 'postgres', what, err.code === '42P01' || err.code === '42883');
  }
}

/**
 * invalid returns the ValidationError of err when the function refused
 * the i-th of n messages (SQLSTATE 22023 naming a field), else null.
 */
function invalid(err, i, n) {
  if (err.code !== '22023' || !err.column || !err.hint) return null;
  const e = new ValidationError(err.column, err.detail || '', err.hint, n === 1 ? 'outbox: ' : `outbox: message ${i + 1} of ${n}: `);
  e.cause = err;
  [e.index, e.count] = [i + 1, n];
  return e;
}

module.exports = { name: 'postgres', isClient, isPool, autocommitting, begin: "await client.query('BEGIN')", insert };
