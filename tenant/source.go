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
	// Tenants returns the tenants now. An error leaves the Fleet serving
	// the tenants it read last.
	Tenants(ctx context.Context) ([]Tenant, error)
}

// SourceFunc is a function that is a Source.
type SourceFunc func(ctx context.Context) ([]Tenant, error)

// Tenants calls f.
func (f SourceFunc) Tenants(ctx context.Context) ([]Tenant, error) { return f(ctx) }

// List is a fixed set of tenants.
func List(ts ...Tenant) Source {
	return SourceFunc(func(context.Context) ([]Tenant, error) {
		if err := Check(ts, "tenant list"); err != nil {
			return nil, err
		}
		return sorted(ts), nil
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
// path names the file in errors.
func ParseFile(b []byte, path string) ([]Tenant, error) {
	var ts []Tenant
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 64<<10)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("tenants file %s, line %d: want a name and a URL separated by spaces, found %d fields", path, n, len(f))
		}
		ts = append(ts, Tenant{Name: f[0], URL: f[1]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("tenants file %s: %w", path, err)
	}
	if err := Check(ts, "tenants file "+path); err != nil {
		return nil, err
	}
	return sorted(ts), nil
}

// Query runs query on a catalogue database each time it is asked: each
// row it returns is a tenant, its name and its URL, as two text columns.
// For example: SELECT name, database_url FROM customers WHERE active.
func Query(db *sql.DB, query string) Source {
	return SourceFunc(func(ctx context.Context) ([]Tenant, error) {
		rows, err := db.QueryContext(ctx, query)
		if err != nil {
			return nil, fmt.Errorf("tenants query: %w", err)
		}
		defer rows.Close()
		var ts []Tenant
		for rows.Next() {
			var t Tenant
			if err := rows.Scan(&t.Name, &t.URL); err != nil {
				return nil, fmt.Errorf("tenants query: each row must be two text columns, a name and a URL: %w", err)
			}
			ts = append(ts, t)
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("tenants query: %w", err)
		}
		if err := Check(ts, "tenants query"); err != nil {
			return nil, err
		}
		return sorted(ts), nil
	})
}
