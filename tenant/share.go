package tenant

import (
	"crypto/sha256"
	"encoding/binary"
)

// Owner returns which of members serves tenant: the one with the highest
// score of rendezvous hashing (SHA-256 of the member's and the tenant's
// names), so that every process that sees the same members agrees without
// talking, and a member that joins or leaves moves only its own share of
// the tenants. It returns "" without members.
func Owner(tenant string, members []string) string {
	best, bestScore := "", uint64(0)
	for _, m := range members {
		h := sha256.New()
		_, _ = h.Write([]byte(m))
		_, _ = h.Write([]byte{0})
		_, _ = h.Write([]byte(tenant))
		if s := binary.BigEndian.Uint64(h.Sum(nil)); best == "" || s > bestScore {
			best, bestScore = m, s
		}
	}
	return best
}
