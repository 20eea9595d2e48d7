'use strict';

// @courier-go/outbox writes messages to Courier's outbox from Node.js, in
// the caller's own database transaction, with the checks and errors of
// Courier's Go Writer (the outbox contract, docs/contract.md). Courier's
// relay then publishes them. See README.md.

const { Message, uuidv7 } = require('./lib/message');
const { ValidationError, DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_MAX_HEADER_BYTES } = require('./lib/validate');
const { write, schedule, writeSync, scheduleSync } = require('./lib/outbox');

module.exports = {
  Message,
  ValidationError,
  write,
  schedule,
  writeSync,
  scheduleSync,
  uuidv7,
  DEFAULT_MAX_PAYLOAD_BYTES,
  DEFAULT_MAX_HEADER_BYTES,
};
