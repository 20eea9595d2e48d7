package dashboard

import (
	"fmt"
	"net/url"
	"strconv"
)

// flash is what a list's banner says after an action posted from it went
// back to it: the code of what was done and its counts, carried in the
// URL of the list (done=CODE&n=…&gone=…&due=…&failed=…). The banner is
// drawn from the fixed message of the code: an unknown code shows nothing
// and a count that is not a number shows 0, so that no text of a URL, a
// link another site made included, reaches the page.
type flash struct {
	code                    string // a key of flashes
	done, gone, due, failed int
}

// flashes are the codes a banner can show, and the words of each.
var flashes = map[string]struct{ verb, gone string }{
	"replayed":  {"replayed", "no longer existed"},
	"discarded": {"discarded", "no longer existed"},
	"cancelled": {"cancelled", "no longer waited"},
	"started":   {"started replay run", "no longer existed"},
}

// query is the flash as URL parameters.
func (f flash) query() string {
	q := url.Values{"done": {f.code}, "n": {strconv.Itoa(f.done)}}
	for k, n := range map[string]int{"gone": f.gone, "due": f.due, "failed": f.failed} {
		if n > 0 {
			q.Set(k, strconv.Itoa(n))
		}
	}
	return q.Encode()
}

// flashText is the banner of the parameters q of a page: "" unless its
// done names a code of flashes.
func flashText(q url.Values) string {
	words, ok := flashes[q.Get("done")]
	if !ok {
		return ""
	}
	count := func(k string) int {
		n, err := strconv.Atoi(q.Get(k))
		if err != nil || n < 0 {
			return 0
		}
		return n
	}
	s := fmt.Sprintf("%s %d", words.verb, count("n"))
	if n := count("due"); n > 0 {
		s += fmt.Sprintf("; %d fell due already and are published, or being published", n)
	}
	if n := count("gone"); n > 0 {
		s += fmt.Sprintf("; %d %s", n, words.gone)
	}
	if n := count("failed"); n > 0 {
		s += fmt.Sprintf("; %d failed: the dashboard's log says why", n)
	}
	return s
}
