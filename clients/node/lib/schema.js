'use strict';

/**
 * writeError returns err, a driver's error while doing what ("insert 2
 * outbox messages") on dialect, as Go's writers word it:
 * "mysql: insert 2 outbox messages: …", and, when missing says one of
 * Courier's tables or functions does not exist, what to run. The driver's
 * error is the cause; its code (such as '42P01' or 'ER_NO_SUCH_TABLE')
 * is kept.
 */
function writeError(err, dialect, what, missing) {
  let message = `${dialect}: ${what}: ${err.message}`;
  if (missing) {
    message += " (courier's schema in this database is missing migrations): create Courier's tables first: run `courier migrate`";
  }
  const e = new Error(message, { cause: err });
  if (err.code !== undefined) e.code = err.code;
  return e;
}

module.exports = { writeError };
