package dashboard

import (
	"net/url"
	"path"
	"strings"
)

// localPath returns next, a path the browser asked to go back to (login's
// next, an action's back), when it is a path of this site: it starts with
// one '/', holds no backslash, control character or space (browsers read
// '\' as '/' and drop tabs and newlines, so "/\evil.com" and "/\t/evil.com"
// lead to evil.com), and names no scheme nor host. Its path is cleaned (so
// "/x/../\evil.com" cannot become "/\evil.com" once a redirect cleans it)
// and encoded again, its query kept, its fragment dropped. Anything else
// returns "/", the overview.
func localPath(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || !printable(next) {
		return "/"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" || !printable(u.Path) {
		return "/"
	}
	p := path.Clean(u.Path)
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") {
		return "/"
	}
	out := (&url.URL{Path: p, RawQuery: u.Query().Encode()}).String()
	if !strings.HasPrefix(out, "/") || strings.HasPrefix(out, "//") || !printable(out) {
		return "/"
	}
	return out
}

// printable reports whether s holds only printable ASCII other than the
// space and the backslash.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '\\' {
			return false
		}
	}
	return true
}
