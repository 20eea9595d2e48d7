// Package columns describes the outbox row once ([Message]: the columns
// that hold a message, each with its name, field and kind) and encodes
// message fields the way every dialect's outbox columns hold them: the
// column lists, placeholder rows, INSERT arguments, unnest arrays, row
// scans and the log encoding of table-less messages all come from that
// description.
package columns
