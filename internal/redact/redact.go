// Package redact hides the secrets a database or broker URL may hold before
// it is shown: in errors, logs, `courier status`, the dashboard, the
// reference shop. It is the one place that decides what of a URL is
// secret; package dburl and package brokerurl export it as their Redact.
//
// The rule, for each URL of a string (several may be comma-separated, as
// NATS servers are), with every hidden part written xxxxx:
//
//   - the password of the user information; the user name stays. On NATS
//     (nats://, tls://) and the web (http://, https://, ws://, wss://) a user
//     name without a password is a token (nats://TOKEN@host), hidden too;
//   - what counts as user information: on a web URL, what precedes the
//     last @ before the first /, ? or # (as net/url reads it); on any
//     other URL, everything before the last @. A password holding an
//     unencoded /, ? # or @ is read differently by different parsers; this
//     way no reading of a database or broker URL shows it. A web URL is
//     read the same way when what precedes its first /, ? or # is
//     user:something that is not a port (a web URL's password of digits
//     followed by an unencoded /, ? or # reads as a port: percent-encode
//     it);
//   - the value of every query parameter whose name holds pass, pwd,
//     secret, token, key, sig, auth, cred, jwt, seed, session or cookie
//     (pgx reads password and sslpassword there);
//   - on the web, every query value, and every path segment that looks
//     like a token: 16 characters or more, or 8 or more mixing letters and
//     digits (the secret of https://hooks.example/services/T0000/B0000/XXXX);
//   - the fragment.
//
// A string without :// (a MySQL DSN, a keyword/value PostgreSQL connection
// string, a SQLite path) has the password of user:password@ hidden, the
// values of secret-named keyword=value pairs and those of its query.
// Nothing is returned as it is because it does not parse.
package redact

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Mask replaces what is hidden.
const Mask = "xxxxx"

// URL returns s with the secrets of each of its URLs replaced by Mask (see
// the package documentation for the rule).
func URL(s string) string {
	out, _ := redact(s)
	return out
}

// In returns text with what URL hides in s replaced by Mask wherever it
// occurs in text: each URL of s as a whole, then each password, token and
// secret parameter value, as written and percent-decoded. A client's error
// may quote the URL it was given, or the password it decoded.
func In(text, s string) string {
	for _, u := range split(s) {
		if r := URL(u); r != u && u != "" {
			text = strings.ReplaceAll(text, u, r)
		}
	}
	_, secrets := redact(s)
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	for _, sec := range secrets {
		text = strings.ReplaceAll(text, sec, Mask)
	}
	return text
}

// ErrUnencoded is wrapped by CheckUserinfo's error.
var ErrUnencoded = errors.New("the password (or token) holds an unencoded character that ends it")

// CheckUserinfo returns an error wrapping ErrUnencoded when a URL of s has
// a password (or token) holding an unencoded character that ends the
// authority for its parser (terminators: "/?#" for Go's net/url, "/" for
// pgx), so that the parser would read part of the password as the host, a
// path, a query or a fragment. The error says to percent-encode; it never
// holds the password.
func CheckUserinfo(s, terminators string) error {
	for _, u := range split(s) {
		scheme, rest, ok := strings.Cut(u, "://")
		if !ok {
			continue
		}
		head := rest
		if i := strings.IndexAny(rest, terminators); i >= 0 {
			head = rest[:i]
		}
		if strings.Contains(head, "@") || !strings.Contains(rest[len(head):], "@") {
			continue
		}
		if hasNonPortColon(head) || isTokenScheme(scheme) && !isWeb(scheme) {
			return fmt.Errorf("%w: a / ? or # there would be read as the start of a path, query or fragment; percent-encode it (/ as %%2F, ? as %%3F, # as %%23, @ as %%40)", ErrUnencoded)
		}
	}
	return nil
}

// split cuts s before each ",scheme://" that starts another URL.
func split(s string) []string {
	var parts []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == ',' && startsURL(s[i+1:]) {
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

// startsURL reports whether s begins with scheme://.
func startsURL(s string) bool {
	i := strings.Index(s, "://")
	if i < 1 {
		return false
	}
	for j, c := range s[:i] {
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !letter && (j == 0 || !(c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return false
		}
	}
	return true
}

// redact returns s redacted and the secrets it hid.
func redact(s string) (string, []string) {
	parts := split(s)
	var all []string
	for i, p := range parts {
		var secrets []string
		parts[i], secrets = one(p)
		all = append(all, secrets...)
	}
	return strings.Join(parts, ","), all
}

// secrets collects what a redaction hid, as written and decoded.
type secrets []string

func (s *secrets) add(v string) {
	if v == "" {
		return
	}
	*s = append(*s, v)
	if dec, err := url.PathUnescape(v); err == nil && dec != v && dec != "" {
		*s = append(*s, dec)
	}
	if dec, err := url.QueryUnescape(v); err == nil && dec != v && dec != "" {
		*s = append(*s, dec)
	}
}

// one redacts a single URL, or a string that is no URL.
func one(u string) (string, []string) {
	var hid secrets
	if !startsURL(u) {
		return notURL(u, &hid), hid
	}
	scheme, rest, _ := strings.Cut(u, "://")
	var b strings.Builder
	b.WriteString(scheme + "://")
	web := isWeb(scheme)
	head := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		head = rest[:i]
	}
	switch at := strings.LastIndex(head, "@"); {
	case at >= 0 && web:
		b.WriteString(userinfo(head[:at], scheme, &hid))
		rest = rest[at+1:]
	case strings.Contains(rest, "@") && (!web || hasNonPortColon(head)):
		// Everything up to the last @: a password may hold an unencoded
		// /, ? or # (or @), which parsers read differently.
		at := strings.LastIndex(rest, "@")
		if ui := rest[:at]; strings.ContainsAny(ui, "/?#") {
			user, pw, hasPW := strings.Cut(ui, ":")
			if hasPW && !strings.ContainsAny(user, "/?#") {
				b.WriteString(user + ":" + Mask + "@")
				hid.add(pw)
			} else {
				b.WriteString(Mask + "@")
				hid.add(ui)
			}
		} else {
			b.WriteString(userinfo(ui, scheme, &hid))
		}
		rest = rest[at+1:]
	}
	rest, fragment, hasFragment := strings.Cut(rest, "#")
	rest, query, hasQuery := strings.Cut(rest, "?")
	host, path, hasPath := strings.Cut(rest, "/")
	b.WriteString(host)
	if hasPath {
		segs := strings.Split(path, "/")
		for i, seg := range segs {
			if web && tokenLike(seg) {
				hid.add(seg)
				segs[i] = Mask
			}
		}
		b.WriteString("/" + strings.Join(segs, "/"))
	}
	if hasQuery {
		b.WriteString("?" + redactQuery(query, web, &hid))
	}
	if hasFragment {
		b.WriteString("#")
		if fragment != "" {
			hid.add(fragment)
			b.WriteString(Mask)
		}
	}
	return b.String(), hid
}

// userinfo redacts the user information ui of a URL of scheme.
func userinfo(ui, scheme string, hid *secrets) string {
	user, pw, hasPW := strings.Cut(ui, ":")
	switch {
	case hasPW:
		hid.add(pw)
		return user + ":" + Mask + "@"
	case isTokenScheme(scheme) && user != "":
		hid.add(user)
		return Mask + "@"
	}
	return ui + "@"
}

// notURL redacts a string without ://: user:password@…, keyword=value
// pairs and a query.
func notURL(s string, hid *secrets) string {
	prefix := ""
	if at := strings.LastIndex(s, "@"); at >= 0 {
		if user, pw, ok := strings.Cut(s[:at], ":"); ok {
			hid.add(pw)
			prefix, s = user+":"+Mask+"@", s[at+1:]
		}
	}
	main, query, hasQuery := strings.Cut(s, "?")
	main = prefix + redactPairs(main, hid)
	if hasQuery {
		return main + "?" + redactQuery(query, false, hid)
	}
	return main
}

// redactPairs hides the values of secret-named keyword=value pairs, as in a
// PostgreSQL keyword/value connection string (password='it”s' host=db).
func redactPairs(s string, hid *secrets) string {
	if !strings.Contains(s, "=") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 {
			b.WriteString(s[i:])
			break
		}
		eq += i
		key := strings.TrimSpace(s[i:eq])
		if k := strings.LastIndexFunc(key, unicode.IsSpace); k >= 0 {
			key = key[k+1:]
		}
		b.WriteString(s[i : eq+1])
		j := eq + 1
		for j < len(s) && s[j] == ' ' {
			b.WriteByte(' ')
			j++
		}
		end := valueEnd(s, j)
		switch {
		case !secretName(key) || end == j:
			b.WriteString(s[j:end])
		case s[j] == '\'':
			hid.add(strings.Trim(s[j:end], "'"))
			b.WriteString("'" + Mask + "'")
		default:
			hid.add(s[j:end])
			b.WriteString(Mask)
		}
		i = end
	}
	return b.String()
}

// valueEnd returns where the value starting at s[j] ends: after its closing
// quote when quoted (” and \' inside), at the next white space otherwise.
func valueEnd(s string, j int) int {
	if j < len(s) && s[j] == '\'' {
		for k := j + 1; k < len(s); k++ {
			switch {
			case s[k] == '\\':
				k++
			case s[k] == '\'' && k+1 < len(s) && s[k+1] == '\'':
				k++
			case s[k] == '\'':
				return k + 1
			}
		}
		return len(s)
	}
	if k := strings.IndexFunc(s[j:], unicode.IsSpace); k >= 0 {
		return j + k
	}
	return len(s)
}

// redactQuery hides the values of a query's secret-named parameters, or
// all of its values when all is set.
func redactQuery(q string, all bool, hid *secrets) string {
	params := strings.Split(q, "&")
	for i, p := range params {
		k, v, ok := strings.Cut(p, "=")
		if !ok || v == "" {
			continue
		}
		if all || secretName(k) {
			hid.add(v)
			params[i] = k + "=" + Mask
		}
	}
	return strings.Join(params, "&")
}

// secretWords are the parts of a parameter's name that make its value
// secret.
var secretWords = []string{"pass", "pwd", "secret", "token", "key", "sig", "auth", "cred", "jwt", "seed", "session", "cookie"}

// secretName reports whether a parameter named name (percent-encoded or
// not) holds a secret. A name that does not decode counts as secret.
func secretName(name string) bool {
	dec, err := url.QueryUnescape(name)
	if err != nil {
		return true
	}
	dec = strings.ToLower(dec)
	for _, w := range secretWords {
		if strings.Contains(dec, w) {
			return true
		}
	}
	return false
}

// tokenLike reports whether a path segment looks like a token: 16
// characters or more, or 8 or more with both letters and digits.
func tokenLike(seg string) bool {
	if dec, err := url.PathUnescape(seg); err == nil {
		seg = dec
	}
	n := len([]rune(seg))
	if n >= 16 {
		return true
	}
	if n < 8 {
		return false
	}
	return strings.ContainsFunc(seg, unicode.IsDigit) && strings.ContainsFunc(seg, unicode.IsLetter)
}

// hasNonPortColon reports whether authority (host[:port], or what may be
// user:password) holds a colon followed by something that is not a port.
func hasNonPortColon(authority string) bool {
	if strings.HasPrefix(authority, "[") { // [IPv6]:port
		if end := strings.IndexByte(authority, ']'); end >= 0 {
			authority = authority[end+1:]
		}
	}
	_, after, ok := strings.Cut(authority, ":")
	if !ok {
		return false
	}
	return strings.ContainsFunc(after, func(r rune) bool { return r < '0' || r > '9' })
}

// isWeb reports whether scheme is HTTP's or WebSocket's.
func isWeb(scheme string) bool {
	switch strings.ToLower(scheme) {
	case "http", "https", "ws", "wss":
		return true
	}
	return false
}

// isTokenScheme reports whether a user name without a password is a token
// in URLs of scheme: NATS's and the web's.
func isTokenScheme(scheme string) bool {
	switch strings.ToLower(scheme) {
	case "nats", "tls", "ws", "wss", "http", "https":
		return true
	}
	return false
}

// Text returns free text, such as the error a message handler returned,
// with the secrets of what it quotes hidden: in each URL (scheme://…, by
// the rule of URL), the password of each user:password@ (a MySQL DSN),
// the value of each secret-named keyword=value pair (password=…,
// api_key=…, token=…); then every other place those secrets occur, as
// written or percent-decoded, when they are 4 bytes or longer (a client's
// error may repeat the password it decoded). Text that quotes none of
// these is returned as it is.
func Text(text string) string {
	var hid secrets
	var out, plain strings.Builder // plain: the text since the last URL or DSN
	for i := 0; i < len(text); {
		end := strings.IndexFunc(text[i:], unicode.IsSpace)
		if end < 0 {
			end = len(text)
		} else {
			end += i
		}
		if w, quoted := field(text[i:end], &hid); quoted {
			// keyword=value pairs are looked for around URLs, not in them
			// (their query's secrets are URL's to hide).
			out.WriteString(redactPairs(plain.String(), &hid))
			plain.Reset()
			out.WriteString(w)
		} else {
			plain.WriteString(w)
		}
		sp := end
		for sp < len(text) {
			r, size := utf8.DecodeRuneInString(text[sp:])
			if !unicode.IsSpace(r) {
				break
			}
			sp += size
		}
		plain.WriteString(text[end:sp])
		i = sp
	}
	out.WriteString(redactPairs(plain.String(), &hid))
	red := out.String()
	slices.SortFunc(hid, func(a, b string) int { return len(b) - len(a) })
	for _, sec := range hid {
		if len(sec) >= 4 && sec != Mask {
			red = strings.ReplaceAll(red, sec, Mask)
		}
	}
	return red
}

// field redacts one word of free text (no white space): the URL it holds,
// or its user:password@, without the quotes, brackets and punctuation
// around it; quoted reports that it held one.
func field(w string, hid *secrets) (out string, quoted bool) {
	core := strings.TrimLeft(w, "\"'`([{<")
	lead := w[:len(w)-len(core)]
	core = strings.TrimRight(core, "\"'`)]}>,;.")
	trail := w[len(lead)+len(core):]
	if k := strings.Index(core, "://"); k > 0 {
		j := k
		for j > 0 && schemeByte(core[j-1]) {
			j--
		}
		for j < k && !isLetter(core[j]) {
			j++
		}
		if j < k {
			u, secrets := one(core[j:])
			*hid = append(*hid, secrets...)
			return lead + core[:j] + u + trail, true
		}
	}
	if at := strings.LastIndex(core, "@"); at > 0 {
		if user, pw, ok := strings.Cut(core[:at], ":"); ok && pw != "" {
			hid.add(pw)
			return lead + user + ":" + Mask + core[at:] + trail, true
		}
	}
	return w, false
}

// schemeByte reports whether c may be part of a URL's scheme.
func schemeByte(c byte) bool {
	return isLetter(c) || c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
