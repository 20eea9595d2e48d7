package postgres

import (
	"fmt"
	"strings"

	"github.com/courier-go/courier/store"
)

// clocked returns the statement query with its arguments args for a store
// whose clock is clock. Without a clock that is query and args unchanged:
// the statement reads the server's now(). With one, every now() in query
// becomes one more parameter, after args, holding the clock's time; a
// query without now() is left as it is. (Not
// coalesce($n, now()) in one statement for both: the planner cannot see a
// parameter's value in a generic plan, which could change the plans
// production runs.)
func clocked(clock store.Clock, query string, args ...any) (string, []any) {
	if clock == nil || !strings.Contains(query, "now()") {
		return query, args
	}
	return strings.ReplaceAll(query, "now()", fmt.Sprintf("$%d::timestamptz", len(args)+1)), append(args, clock())
}
