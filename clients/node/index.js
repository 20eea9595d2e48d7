'use strict';

// @courier-go/outbox writes messages to Courier's outbox from Node.js, in
// the caller's own database transaction, with the checks and errors of
// Courier's Go Writer (the outbox contract, docs/contract.md). Courier's
// relay then publishes them. See README.md.

const { Message, uuidv7 } = require('./lib/message');
const { ValidationError, DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_MAX_HEADER_BYTES } = require('./lib/validate');
const { write, schedule, writeSync, scheduleSync, validate, checkHeaderName } = require('./lib/outbox');

/** Header names Courier understands, as Go's courier.Header* constants. */
const HEADER_TRACE_PARENT = 'traceparent';
const HEADER_TRACE_STATE = 'tracestate';
const HEADER_CORRELATION_ID = 'Courier-Correlation-Id';
const HEADER_CAUSATION_ID = 'Courier-Causation-Id';

module.exports = {
  Message,
  ValidationError,
  write,
  schedule,
  writeSync,
  scheduleSync,
  validate,
  checkHeaderName,
  uuidv7,
  DEFAULT_MAX_PAYLOAD_BYTES,
  DEFAULT_MAX_HEADER_BYTES,
  HEADER_TRACE_PARENT,
  HEADER_TRACE_STATE,
  HEADER_CORRELATION_ID,
  HEADER_CAUSATION_ID,
};
