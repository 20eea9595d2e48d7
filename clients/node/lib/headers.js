'use strict';

const { sortedNames } = require('./validate');

/**
 * headersJSON encodes headers as Go's encoding/json encodes a
 * map[string]string, which is the text Go's writers store (MySQL's and
 * MariaDB's JSON columns and SQLite's TEXT keep it as sent): names sorted
 * by their bytes, no spaces, and <, >, &, U+2028 and U+2029 escaped as
 * \u003c, \u003e, \u0026, \u2028 and \u2029. null when there are none,
 * as the column is NULL then.
 */
function headersJSON(headers) {
  if (!headers) return null;
  const names = sortedNames(headers);
  if (names.length === 0) return null;
  return '{' + names.map((n) => goString(n) + ':' + goString(headers[n])).join(',') + '}';
}

const GO_ESCAPES = { '<': '\\u003c', '>': '\\u003e', '&': '\\u0026', '\u2028': '\\u2028', '\u2029': '\\u2029' };

/** goString is JSON.stringify(s) with Go's extra escapes. */
function goString(s) {
  return JSON.stringify(s).replace(/[<>&\u2028\u2029]/g, (c) => GO_ESCAPES[c]);
}

module.exports = { headersJSON };
