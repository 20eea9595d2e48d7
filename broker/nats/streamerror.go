package nats

import (
	"context"
	"errors"
	"fmt"
	"strings"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// StreamError is returned when a NATS broker opened by URL (Kind's Open,
// through package brokerurl) cannot create its stream.
type StreamError struct {
	// Stream is the stream's name and Subjects the subjects it would
	// capture.
	Stream, Subjects string
	// Overlap holds the streams whose subjects overlap Subjects, when that
	// is why (JetStream error 10065); it is empty when they could not be
	// listed.
	Overlap []string
	// Err is JetStream's error.
	Err error
}

// Error says why the stream was not created.
func (e *StreamError) Error() string {
	if e.Overlap != nil {
		return fmt.Sprintf("cannot create stream %s: its subjects %s overlap those of stream %s; publish into that stream, or use subjects of your own",
			e.Stream, e.Subjects, strings.Join(e.Overlap, ", "))
	}
	return e.Err.Error()
}

// Unwrap returns JetStream's error.
func (e *StreamError) Unwrap() error { return e.Err }

// subjectOverlap is JetStream's error code for a stream whose subjects
// overlap another stream's.
const subjectOverlap jetstream.ErrorCode = 10065

// streamError wraps EnsureStream's err in a *StreamError, listing the
// streams that capture the subjects when that is why.
func streamError(ctx context.Context, nc *natsgo.Conn, mapping Config, stream string, err error) error {
	e := &StreamError{Stream: stream, Subjects: mapping.Subjects(), Err: err}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == subjectOverlap {
		e.Overlap = []string{}
		if js, jerr := jetstream.New(nc); jerr == nil {
			names := js.StreamNames(ctx, jetstream.WithStreamListSubject(e.Subjects))
			for n := range names.Name() {
				e.Overlap = append(e.Overlap, n)
			}
		}
	}
	return e
}
