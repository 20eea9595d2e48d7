// Package setting holds the rule every broker configuration follows (the
// project's convention, as in relay.Config): a field left zero takes its
// default, and a negative one is an error that names the field, its value
// and the fix. Each configuration's setDefaults and validate state the
// fields; the rule is written here once.
package setting

import "fmt"

// Default sets *field to def when it is zero.
func Default[T comparable](field *T, def T) {
	var zero T
	if *field == zero {
		*field = def
	}
}

// Positive returns nil when v, a field whose zero took default def, is
// positive, and otherwise an error naming the field (name, such as "nats:
// PublisherConfig.AckTimeout"), its value and the fix.
func Positive[T ~int | ~int64](name string, v, def T) error {
	if v > 0 {
		return nil
	}
	return fmt.Errorf("%s is %v: use more than 0, or 0 for %v", name, v, def)
}

// First returns the first error of errs that is not nil.
func First(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
