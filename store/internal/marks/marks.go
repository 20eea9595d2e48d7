package marks

import "github.com/google/uuid"

// Fresh returns, for each of ids in order, whether it is among inserted,
// the ids whose markers a statement inserted (in any order): MarkGroup's
// flags.
func Fresh(ids, inserted []uuid.UUID) []bool {
	set := make(map[uuid.UUID]struct{}, len(inserted))
	for _, id := range inserted {
		set[id] = struct{}{}
	}
	fresh := make([]bool, len(ids))
	for i, id := range ids {
		_, fresh[i] = set[id]
	}
	return fresh
}
