// Package cetest decodes what Courier's publishers send in the CloudEvents
// binary content mode with the CloudEvents Go SDK, for the brokers' tests.
// Only tests import it.
package cetest
