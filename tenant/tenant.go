package tenant

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/courier-go/courier/store/dburl"
)

// Header is the message header a Fleet sets to the name of the tenant
// whose database a message came from. Consumers route by it. Like every
// Courier- header it is reserved: the outbox refuses it from producers,
// so a tenant cannot write into another's name.
const Header = "Courier-Tenant"

// Tenant is one tenant's database: a database of its own, or a schema of
// a shared PostgreSQL database (a URL with search_path).
type Tenant struct {
	// Name identifies the tenant in logs, metrics, the Header of its
	// messages and the --tenant flag: 1 to 64 letters, digits, '.', '_'
	// and '-'.
	Name string `json:"name"`
	// URL is its database, in a form package store/dburl opens:
	// postgres://…[?search_path=schema], mysql://… or sqlite:path.
	URL string `json:"url"`
}

// String returns the tenant's name and where its database is, without a
// password.
func (t Tenant) String() string { return t.Name + " (" + dburl.Redact(t.URL) + ")" }

var validName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// Check reports the first entry of a tenant set that Sift rejects,
// naming the entry and the fix: a name that is not valid, a name given
// twice, or a URL package store/dburl does not read. from says where the
// set came from, for the message. Use it where one bad entry must stop
// everything, such as a command line; a Sieve serves the others.
func Check(ts []Tenant, from string) error {
	if _, rej := Sift(ts); len(rej) > 0 {
		return fmt.Errorf("%s: tenant %s", from, rej[0])
	}
	return nil
}

// sorted returns ts sorted by name.
func sorted(ts []Tenant) []Tenant {
	ts = slices.Clone(ts)
	slices.SortFunc(ts, func(a, b Tenant) int { return strings.Compare(a.Name, b.Name) })
	return ts
}
