package columns

import (
	"encoding/binary"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
)

// AppendLog appends the field of m that c holds to b, in the binary form
// of PostgreSQL's table-less messages (LogOnly): a uuid's 16 bytes; a
// string's or bytes' length (varint) and bytes; an int as a varint; a
// time's Unix microseconds as a zig-zag varint; headers as their number
// and each name and value, sorted by name.
func AppendLog(b []byte, c Column, m *courier.Message) []byte {
	switch p := c.Of(m).(type) {
	case *uuid.UUID:
		return append(b, p[:]...)
	case *string:
		return AppendLogString(b, *p)
	case *int:
		return binary.AppendUvarint(b, uint64(*p))
	case *[]byte:
		return append(binary.AppendUvarint(b, uint64(len(*p))), *p...)
	case *time.Time:
		return binary.AppendVarint(b, p.UnixMicro())
	case *map[string]string:
		return AppendLogHeaders(b, *p)
	}
	return b
}

// AppendLogString appends s's length (varint) and bytes to b.
func AppendLogString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// AppendLogHeaders appends the number of h's headers and each one's name
// and value, sorted by name, to b.
func AppendLogHeaders(b []byte, h map[string]string) []byte {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, k := range names {
		b = AppendLogString(AppendLogString(b, k), h[k])
	}
	return b
}

// ReadLog reads into m the field c holds from the front of b, as AppendLog
// wrote it, and returns the rest of b; false when b holds no such value
// (truncated, or a string that is not UTF-8).
func ReadLog(b []byte, c Column, m *courier.Message) ([]byte, bool) {
	switch p := c.Of(m).(type) {
	case *uuid.UUID:
		if len(b) < 16 {
			return b, false
		}
		*p = uuid.UUID(b[:16])
		return b[16:], true
	case *string:
		s, rest, ok := ReadLogString(b)
		*p = s
		return rest, ok
	case *int:
		v, n := binary.Uvarint(b)
		if n <= 0 || v > 1<<31-1 {
			return b, false
		}
		*p = int(v)
		return b[n:], true
	case *[]byte:
		v, n := binary.Uvarint(b)
		if n <= 0 || v > uint64(len(b)-n) {
			return b, false
		}
		*p = append([]byte{}, b[n:n+int(v)]...)
		return b[n+int(v):], true
	case *time.Time:
		v, n := binary.Varint(b)
		if n <= 0 {
			return b, false
		}
		*p = time.UnixMicro(v).UTC()
		return b[n:], true
	case *map[string]string:
		return readLogHeaders(b, p)
	}
	return b, false
}

// ReadLogString reads a string that AppendLogString wrote from the front
// of b and returns the rest of b; false when b holds none or it is not
// UTF-8.
func ReadLogString(b []byte) (string, []byte, bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return "", b, false
	}
	s := string(b[k : k+int(n)])
	return s, b[k+int(n):], utf8.ValidString(s)
}

// readLogHeaders reads headers that AppendLogHeaders wrote into *h (nil
// when there are none) from the front of b, and returns the rest.
func readLogHeaders(b []byte, h *map[string]string) ([]byte, bool) {
	count, n := binary.Uvarint(b)
	if n <= 0 || count > uint64(len(b)) {
		return b, false
	}
	b = b[n:]
	*h = nil
	if count > 0 {
		*h = make(map[string]string, count)
	}
	for range count {
		var k, v string
		var ok bool
		if k, b, ok = ReadLogString(b); !ok {
			return b, false
		}
		if v, b, ok = ReadLogString(b); !ok {
			return b, false
		}
		(*h)[k] = v
	}
	return b, true
}
