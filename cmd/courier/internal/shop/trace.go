package shop

import (
	"net/http"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// traced serves next in a server span named name, the child of the trace
// context the client sent (traceparent), so that the messages the request
// writes carry the request's trace on to every service the order visits.
// The span is recorded by the program's global TracerProvider, when it set
// one.
func traced(name string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := otel.Tracer("github.com/courier-go/courier/cmd/courier/internal/shop").Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}
