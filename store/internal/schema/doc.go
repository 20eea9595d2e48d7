// Package schema holds what the dialects' migrations share: loading the
// embedded scripts, deciding which of them a database lacks, and checking a
// database's version against them. Each dialect keeps its scripts, its
// version table and how it applies them.
package schema
