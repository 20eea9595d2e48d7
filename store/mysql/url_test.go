package mysql_test

import (
	"strings"
	"testing"

	"github.com/courier-go/courier/store/mysql"
)

func TestDSNFromURL(t *testing.T) {
	for _, c := range []struct{ url, dsn string }{
		{"mysql://app@db:3306/shop", "app@tcp(db:3306)/shop"},
		{"mysql://app:a%40b%3Ac%2Fd@db:3306/shop", "app:a@b:c/d@tcp(db:3306)/shop"},
		{"mysql://app:s@db/shop?timeout=5s", "app:s@tcp(db:3306)/shop?timeout=5s"},
	} {
		got, err := mysql.DSNFromURL(c.url)
		if err != nil || got != c.dsn {
			t.Errorf("DSNFromURL(%q) = %q, %v; want %q", c.url, got, err, c.dsn)
		}
	}
	for _, c := range []struct{ url, want string }{
		{"mysql://nohost", "no host or no database"},
		{"mysql://app:secret@db:3306/shop?timeout=soon", "URL parameters"},
		{"mysql://app:100%@db/shop", "invalid URL escape"},
	} {
		_, err := mysql.DSNFromURL(c.url)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("DSNFromURL(%q): %v; want an error with %q and no password", c.url, err, c.want)
		}
	}
}
