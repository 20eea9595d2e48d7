package mysql

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"
)

// DSNFromURL turns a URL, mysql://user:password@host:3306/database?param=value,
// into the DSN github.com/go-sql-driver/mysql opens. User, password and
// database are percent-decoded, as in any URL (a password holding '@' is
// written %40); the query's parameters are the driver's (timeout=5s,
// tls=true, …) and are checked here.
//
// It fails when raw does not parse as a URL, names no host or no database,
// or carries a parameter the driver rejects.
func DSNFromURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which may hold a password
		}
		return "", fmt.Errorf("mysql: URL: %w", err)
	}
	if u.Scheme != "mysql" {
		return "", fmt.Errorf("mysql: URL scheme is %q: use mysql://", u.Scheme)
	}
	db := strings.Trim(u.Path, "/")
	if u.Host == "" || db == "" {
		return "", errors.New("mysql: URL names no host or no database: use mysql://user:password@host:3306/database")
	}
	cfg := gomysql.NewConfig()
	cfg.Net, cfg.Addr, cfg.DBName = "tcp", u.Host, db
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	dsn := cfg.FormatDSN()
	if u.RawQuery == "" {
		return dsn, nil
	}
	// The driver reads its parameters as URL query values: let it parse
	// them, so a misspelt value fails here rather than at the first query.
	withParams, err := gomysql.ParseDSN(dsn + "?" + u.RawQuery)
	if err != nil {
		return "", fmt.Errorf("mysql: URL parameters: %w", err)
	}
	return withParams.FormatDSN(), nil
}
