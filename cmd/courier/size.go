package main

import (
	"fmt"
	"strconv"
	"strings"
)

// byteSize is a flag's size in bytes, written as PostgreSQL's settings
// write sizes (max_slot_wal_keep_size): a number with B, kB, MB, GB or TB,
// in powers of 1024, such as 512MB or 1.5GB; a bare number is bytes.
type byteSize int64

// sizeUnits are the units byteSize reads and writes, largest first.
var sizeUnits = []struct {
	name string
	n    int64
}{{"TB", 1 << 40}, {"GB", 1 << 30}, {"MB", 1 << 20}, {"kB", 1 << 10}, {"B", 1}}

// UnmarshalText implements encoding.TextUnmarshaler, for the flags.
func (s *byteSize) UnmarshalText(text []byte) error {
	in := strings.TrimSpace(string(text))
	num, mult := in, int64(1)
	for _, u := range sizeUnits {
		if len(in) > len(u.name) && strings.EqualFold(in[len(in)-len(u.name):], u.name) {
			num, mult = strings.TrimSpace(in[:len(in)-len(u.name)]), u.n
			break
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 || f*float64(mult) >= 1<<62 || strings.ContainsAny(num, "eEnNxX_") {
		return fmt.Errorf("%q is not a size: use a number with a unit, such as 512MB or 1GB (B, kB, MB, GB or TB, in powers of 1024 as in postgresql.conf)", in)
	}
	*s = byteSize(f * float64(mult))
	return nil
}

// String writes s as PostgreSQL's pg_size_pretty does: "812 bytes",
// "12 MB", "1.5 GB" (one decimal under 10 of a unit).
func (s byteSize) String() string {
	n := int64(s)
	for _, u := range sizeUnits[:4] {
		if n >= u.n {
			v := float64(n) / float64(u.n)
			if v < 10 {
				return strings.TrimSuffix(strconv.FormatFloat(v, 'f', 1, 64), ".0") + " " + u.name
			}
			return strconv.FormatFloat(v, 'f', 0, 64) + " " + u.name
		}
	}
	return strconv.FormatInt(n, 10) + " bytes"
}
