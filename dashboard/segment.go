package dashboard

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
)

// segment returns the path segment that stands for s, a name or an id
// from data (a tenant's name, a saga's type or id, a failure group's id),
// in a URL the dashboard makes. It is the one place such segments are
// made: every link, form action and redirect built from data goes
// through it, and unsegment reads them back.
//
// s is written as url.PathEscape writes it (letters, digits and
// "-._~!$&'()*+,:=@" as they are, "/", "?", "#", "%", "\" and the rest
// percent-encoded), so that it can neither end the segment nor the path.
// A segment that a browser or a server would take for a step of the path
// ("." and "..", which they also read percent-encoded) or that would be
// empty is written '~' and s in unpadded base64url instead, as is s
// starting with '~', so that a segment starting with '~' is always one so
// coded.
func segment(s string) string {
	if s == "" || s == "." || s == ".." || strings.HasPrefix(s, "~") {
		return "~" + base64.RawURLEncoding.EncodeToString([]byte(s))
	}
	return url.PathEscape(s)
}

// unsegment returns what the segment seg, percent-decoded already, stands
// for (see segment); ok is false when it stands for nothing.
func unsegment(seg string) (s string, ok bool) {
	enc, coded := strings.CutPrefix(seg, "~")
	if !coded {
		return seg, seg != ""
	}
	b, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return "", false
	}
	return string(b), true
}

// pathValue returns what the wildcard name of r's route stands for (see
// segment), or answers 404 and returns false.
func (h *Handler) pathValue(w http.ResponseWriter, r *http.Request, name string) (string, bool) {
	s, ok := unsegment(r.PathValue(name))
	if !ok {
		h.fail(w, r, http.StatusNotFound, "There is no such page.")
	}
	return s, ok
}
