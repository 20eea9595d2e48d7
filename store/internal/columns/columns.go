// Package columns encodes message fields the way every dialect's outbox
// columns hold them.
package columns

import "encoding/json"

// Payload returns p, or an empty slice when p is nil: payload columns are
// NOT NULL, and an empty payload is a payload.
func Payload(p []byte) []byte {
	if p == nil {
		return []byte{}
	}
	return p
}

// HeadersJSON encodes headers as a JSON object, nil (NULL) when there are
// none.
func HeadersJSON(h map[string]string) []byte {
	if len(h) == 0 {
		return nil
	}
	b, _ := json.Marshal(h) // a map of strings always encodes
	return b
}

// HeadersText is HeadersJSON as a string parameter, for drivers that would
// send a []byte as binary to a JSON or TEXT column; nil when there are no
// headers.
func HeadersText(h map[string]string) any {
	if b := HeadersJSON(h); b != nil {
		return string(b)
	}
	return nil
}
