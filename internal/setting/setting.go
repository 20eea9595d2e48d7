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
