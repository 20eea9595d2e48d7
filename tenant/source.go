package tenant

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
)

// Source lists the tenants. A Fleet reads it when it starts and again
// every Config.Refresh, so that tenants come and go without a restart.
type Source interface {
	// Tenants returns the tenants now. Entries that are not tenants (see
	// Sift) are left out and listed in a *RejectedError returned beside
	// the others, which are served. Any other error leaves the Fleet
	// serving the tenants it read last.
	Tenants(ctx context.Context) ([]Tenant, error)
}

// SourceFunc is a function that is a Source.
type SourceFunc func(ctx context.Context) ([]Tenant, error)

// Tenants calls f.
func (f SourceFunc) Tenants(ctx context.Context) ([]Tenant, error) { return f(ctx) }

// List is a fixed set of tenants. Entries that are not valid are
// rejected (see RejectedError), the others served.
func List(ts ...Tenant) Source {
	return SourceFunc(func(context.Context) ([]Tenant, error) {
		return sifted(ts, nil, "tenant list")
	})
}

// File reads the tenants from a text file each time it is asked: one
// tenant per line, its name and its URL separated by spaces; blank lines
// and lines starting with # are skipped. Edit the file (write a new one
// and rename it over the old) to add or remove tenants while relays run.
func File(path string) Source {
	return SourceFunc(func(context.Context) ([]Tenant, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("tenants file: %w", err)
		}
		return ParseFile(b, path)
	})
}

// ParseFile reads the tenants of a tenants file's content (see File);
// path names the file in errors. Lines that are not valid tenants are
// left out and listed in a *RejectedError returned beside the others.
func ParseFile(b []byte, path string) ([]Tenant, error) {
	var ts []Tenant
	var rej []Rejected
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 64<<10)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			rej = append(rej, rejected(f[0], fmt.Sprintf("line %d: want a name and a URL separated by spaces, found %d fields", n, len(f))))
			continue
		}
		ts = append(ts, Tenant{Name: f[0], URL: f[1]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("tenants file %s: %w", path, err)
	}
	return sifted(ts, rej, "tenants file "+path)
}

// Query runs query on a catalogue database each time it is asked: each
// row it returns is a tenant, its name and its URL, as two text columns.
// For example: SELECT name, database_url FROM customers WHERE active. A
// row that is not a valid tenant (a NULL included) is rejected (see
// RejectedError), the other rows' tenants served.
func Query(db *sql.DB, query string) Source {
	return SourceFunc(func(ctx context.Context) ([]Tenant, error) {
		rows, err := db.QueryContext(ctx, query)
		if err != nil {
			return nil, fmt.Errorf("tenants query: %w", err)
		}
		defer rows.Close()
		var ts []Tenant
		var rej []Rejected
		for rows.Next() {
			var name, u sql.NullString
			if err := rows.Scan(&name, &u); err != nil {
				return nil, fmt.Errorf("tenants query: each row must be two text columns, a name and a URL: %w", err)
			}
			switch {
			case !name.Valid:
				rej = append(rej, rejected("", "the name is NULL: give every tenant a name"))
			case !u.Valid:
				rej = append(rej, rejected(name.String, "the URL is NULL: give every tenant its database's URL"))
			default:
				ts = append(ts, Tenant{Name: name.String, URL: u.String})
			}
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("tenants query: %w", err)
		}
		return sifted(ts, rej, "tenants query")
	})
}
