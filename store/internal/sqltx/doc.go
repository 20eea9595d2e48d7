// Package sqltx holds the database/sql transaction helpers every dialect
// shares: running a function in a transaction that is always ended,
// statements written with ? placeholders for drivers that number theirs,
// and the queue in which a process lines up its transactions on a database
// with one writer.
package sqltx
