package columns

import (
	"strconv"
	"strings"

	"github.com/courier-go/courier/broker/wire"
	"github.com/courier-go/courier/store"
)

// Cut is the SQL of the first n characters of the text expr, which every
// dialect takes: SUBSTR counts characters in PostgreSQL, in MySQL (bytes
// of a binary string) and in SQLite. A list's summaries hold their texts
// cut this way, so that the database sends no more of a text than the
// list shows.
func Cut(expr string, n int) string {
	return "SUBSTR(" + expr + ", 1, " + strconv.Itoa(n) + ")"
}

// Preview is the SQL of a summary's text column: its first store.TextPreview
// characters.
func Preview(column string) string { return Cut(column, store.TextPreview) }

// ErrorPreview is the SQL of a summary's last error: its first
// store.ErrorPreview characters.
var ErrorPreview = Cut("last_error", store.ErrorPreview)

// ParkedType is the SQL of the message type a parked delivery's headers
// name (store.ParkedSummary.Type): the first value of the first header of
// wire.TypeHeaders that has one other than "", as wire.TypeOf reads it,
// cut to store.TextPreview characters; "" when none has. first returns
// the dialect's SQL of the first value of the header name in the headers
// column, NULL when there is none; name is a constant holding no quote
// nor backslash, which first may write into a literal.
func ParkedType(first func(name string) string) string {
	var values []string
	for _, name := range wire.TypeHeaders() {
		if strings.ContainsAny(name, `'"\`) {
			panic("columns: header name " + strconv.Quote(name) + " cannot be written into a literal")
		}
		values = append(values, "NULLIF("+first(name)+", '')")
	}
	return Preview("COALESCE(" + strings.Join(values, ", ") + ", '')")
}
