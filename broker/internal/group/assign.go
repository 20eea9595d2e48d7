package group

import (
	"cmp"
	"hash/fnv"
	"slices"
	"strconv"
)

// MaxPartitions bounds a group's partition count.
const MaxPartitions = 4096

// Assign returns the partitions (0 to partitions-1) each of members owns.
// Every member gets partitions/len(members) of them or one more; which ones
// is decided by rendezvous hashing, so that the same members give the same
// answer everywhere and a change of members moves few partitions besides
// those of the member that came or went. Duplicate members count once; no
// members, no assignment.
func Assign(members []string, partitions int) map[string][]int {
	ms := slices.Clone(members)
	slices.Sort(ms)
	ms = slices.Compact(ms)
	out := make(map[string][]int, len(ms))
	if len(ms) == 0 || partitions < 1 {
		return out
	}
	// The members that take one more than the others: those ranked first
	// by a hash of their own.
	byRank := slices.Clone(ms)
	slices.SortFunc(byRank, func(a, b string) int { return cmp.Or(cmp.Compare(score(a, -1), score(b, -1)), cmp.Compare(a, b)) })
	room := make(map[string]int, len(ms))
	for i, m := range byRank {
		room[m] = partitions / len(ms)
		if i < partitions%len(ms) {
			room[m]++
		}
	}
	prefs := make([]string, len(ms))
	for p := range partitions {
		copy(prefs, ms)
		slices.SortFunc(prefs, func(a, b string) int { return cmp.Or(cmp.Compare(score(b, p), score(a, p)), cmp.Compare(a, b)) })
		for _, m := range prefs {
			if room[m] > 0 {
				room[m]--
				out[m] = append(out[m], p)
				break
			}
		}
	}
	return out
}

// score is member's weight for partition p (p -1: for its rank).
func score(member string, p int) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(member))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write(strconv.AppendInt(nil, int64(p), 10))
	return mix(h.Sum64())
}

// mix spreads the bits of FNV's result, whose high bits vary little for
// inputs that differ only at their end.
func mix(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}
