package mysql

import (
	"strings"

	"github.com/courier-go/courier/store"
)

// serverNow is the server's clock in the store's statements.
const serverNow = "UTC_TIMESTAMP(6)"

// clocked returns the statement query with its arguments args for a store
// whose clock is clock. Without a clock that is query and args unchanged:
// the statement reads the server's clock. With one, each UTC_TIMESTAMP(6)
// in query becomes a placeholder whose argument, the clock's time, takes
// its place among args. Placeholders are counted by their '?', so query
// must have none inside a literal.
func clocked(clock store.Clock, query string, args ...any) (string, []any) {
	if clock == nil || !strings.Contains(query, serverNow) {
		return query, args
	}
	now := formatTime(clock())
	var b strings.Builder
	out := make([]any, 0, len(args)+strings.Count(query, serverNow))
	for {
		i := strings.Index(query, serverNow)
		if i < 0 {
			break
		}
		n := strings.Count(query[:i], "?")
		out = append(out, args[:n]...)
		out = append(out, now)
		args = args[n:]
		b.WriteString(query[:i])
		b.WriteByte('?')
		query = query[i+len(serverNow):]
	}
	b.WriteString(query)
	return b.String(), append(out, args...)
}
