package nats

import "strings"

// KeyToken returns key as one subject token, the last of a message's
// subject under Config.KeySubjects. Letters, digits and - _ ~ : = @ + stay
// as they are; every other byte (a dot, a wildcard, white space, %,
// anything beyond ASCII) is written %XX, in upper-case hexadecimal, so
// that two keys never share a token: "o-42" stays "o-42", "eu.o 42"
// becomes "eu%2Eo%2042". The empty key, which Courier never sends, is "%".
func KeyToken(key string) string {
	if key == "" {
		return "%"
	}
	n := 0
	for i := 0; i < len(key); i++ {
		if !plainKeyByte(key[i]) {
			n++
		}
	}
	if n == 0 {
		return key
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(key) + 2*n)
	for i := 0; i < len(key); i++ {
		c := key[i]
		if plainKeyByte(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// plainKeyByte reports whether c stays as it is in a key's token.
func plainKeyByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-_~:=@+", c) >= 0
}
