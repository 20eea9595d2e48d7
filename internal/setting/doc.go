// Package setting holds the rule every runtime configuration follows (the
// project's convention, as in relay.Config): a field left zero takes its
// default, and a negative one is an error that names the field, its value
// and the fix. Each configuration's setDefaults and validate state the
// fields; the rule is written here once.
package setting
