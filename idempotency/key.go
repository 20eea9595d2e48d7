package idempotency

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// MaxKeyLength is the longest key accepted by default, in bytes.
const MaxKeyLength = 255

// ErrInvalidKey is wrapped by ParseKey's errors.
var ErrInvalidKey = errors.New("invalid Idempotency-Key")

// ParseKey reads an Idempotency-Key header value. The draft standard makes
// it a Structured Field string (RFC 8941): "8e03978e-40d5-43e8-bc93-6894a57f9324",
// in double quotes, with \" and \\ the only escapes. Many clients send the
// bare form, 8e03978e-40d5-43e8-bc93-6894a57f9324, which is accepted too
// (visible ASCII without quotes or backslashes). The key must be 1 to maxLen
// bytes once unquoted.
func ParseKey(value string, maxLen int) (string, error) {
	v := strings.Trim(value, " \t")
	if v == "" {
		return "", fmt.Errorf("%w: it is empty; send a unique value per operation, such as a UUID", ErrInvalidKey)
	}
	var key string
	if v[0] == '"' {
		var b strings.Builder
		i := 1
		for ; i < len(v); i++ {
			c := v[i]
			if c == '\\' {
				i++
				if i == len(v) || (v[i] != '"' && v[i] != '\\') {
					return "", fmt.Errorf(`%w: in a quoted key only \" and \\ may be escaped`, ErrInvalidKey)
				}
				b.WriteByte(v[i])
				continue
			}
			if c == '"' {
				break
			}
			if c < 0x20 || c > 0x7e {
				return "", fmt.Errorf("%w: it contains byte 0x%02x; use printable ASCII", ErrInvalidKey, c)
			}
			b.WriteByte(c)
		}
		if i >= len(v) {
			return "", fmt.Errorf("%w: the closing quote is missing", ErrInvalidKey)
		}
		if i != len(v)-1 {
			return "", fmt.Errorf("%w: text follows the closing quote", ErrInvalidKey)
		}
		key = b.String()
	} else {
		for i := 0; i < len(v); i++ {
			if c := v[i]; c <= 0x20 || c > 0x7e || c == '"' || c == '\\' {
				return "", fmt.Errorf(`%w: byte 0x%02x is not allowed in an unquoted key; quote it as a structured-field string ("…")`, ErrInvalidKey, c)
			}
		}
		key = v
	}
	if key == "" {
		return "", fmt.Errorf("%w: it is empty; send a unique value per operation, such as a UUID", ErrInvalidKey)
	}
	if len(key) > maxLen {
		return "", fmt.Errorf("%w: it is %d bytes, over the limit of %d; a UUID is enough", ErrInvalidKey, len(key), maxLen)
	}
	return key, nil
}

// Fingerprint identifies a request's content: SHA-256 over the method, the
// path with its query, and the body, each length-prefixed so that no two
// different requests share an encoding. A key reused with another
// fingerprint is a client error (422).
func Fingerprint(method, pathAndQuery string, body []byte) []byte {
	h := sha256.New()
	var n [8]byte
	for _, part := range [][]byte{[]byte(method), []byte(pathAndQuery), body} {
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	return h.Sum(nil)
}
