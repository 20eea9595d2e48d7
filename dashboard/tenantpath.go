package dashboard

import (
	"encoding/base64"
	"net/url"
	"strings"
)

// segment returns the path segment that stands for the tenant named name
// in its pages' URLs (/t/SEGMENT/): the name itself when it is made of
// letters, digits, '.', '_' and '-' only (as package tenant's names are)
// and is neither "." nor "..", which browsers and servers take for steps
// of a path; otherwise '~' and the name in unpadded base64url. Either way
// the segment holds only characters a URL's path carries as they are, so
// no name, whatever it holds, can step out of its URL, end it early or
// break a link.
func segment(name string) string {
	if plainName(name) {
		return name
	}
	return "~" + base64.RawURLEncoding.EncodeToString([]byte(name))
}

// plainName reports whether name is its own path segment.
func plainName(name string) bool {
	if name == "" || name == "." || name == ".." {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// tenantName returns the name of the tenant the segment seg of a request's
// path (percent-encoded as it came) stands for; ok is false when it
// stands for none.
func tenantName(seg string) (name string, ok bool) {
	s, err := url.PathUnescape(seg)
	if err != nil {
		return "", false
	}
	enc, coded := strings.CutPrefix(s, "~")
	if !coded {
		return s, s != ""
	}
	b, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return "", false
	}
	return string(b), true
}

// tenantLink is the path of a tenant's overview, under the dashboard's
// prefix.
func tenantLink(name string) string { return "/t/" + segment(name) + "/" }
