package marks

import (
	"slices"
	"testing"

	"github.com/google/uuid"
)

func TestFresh(t *testing.T) {
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	got := Fresh([]uuid.UUID{a, b, c}, []uuid.UUID{c, a})
	if want := []bool{true, false, true}; !slices.Equal(got, want) {
		t.Fatalf("Fresh = %v, want %v", got, want)
	}
	if got := Fresh([]uuid.UUID{a}, nil); !slices.Equal(got, []bool{false}) {
		t.Fatalf("Fresh with nothing inserted = %v, want [false]", got)
	}
}
