package claims

import (
	"errors"
	"slices"
	"testing"

	"github.com/courier-go/courier/store"
)

func TestPicker(t *testing.T) {
	p := NewPicker(map[string]struct{}{"held": {}}, 3)
	rows := []struct {
		id  int64
		key string
	}{{1, "held"}, {2, "a"}, {3, "held"}, {4, "b"}, {5, "a"}, {6, "c"}}
	full := false
	for _, r := range rows {
		if full = p.Offer(r.id, r.key, false); full {
			break
		}
	}
	if !full || p.Examined != 5 {
		t.Fatalf("full %v after %d rows, want full after 5", full, p.Examined)
	}
	if got := p.IDs(); !slices.Equal(got, []int64{2, 4, 5}) {
		t.Fatalf("picked %v, want [2 4 5]", got)
	}
	if got := p.Keys(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("keys %v, want [a b]", got)
	}
	p.Drop(map[string]struct{}{"a": {}})
	if got := p.IDs(); !slices.Equal(got, []int64{4}) || !slices.Equal(p.Keys(), []string{"b"}) {
		t.Fatalf("after dropping a: %v %v, want [4] [b]", got, p.Keys())
	}
}

// A lease records its rows' ids and distinct keys as JSON arrays.
func TestPickerJSON(t *testing.T) {
	p := NewPicker(nil, 10)
	for i, k := range []string{"a", "b", "a", `q"t`} {
		p.Offer(int64(i+7), k, false)
	}
	ids, keys, err := p.JSON()
	if err != nil || string(ids) != "[7,8,9,10]" || string(keys) != `["a","b","q\"t"]` {
		t.Fatalf("JSON = %s %s %v", ids, keys, err)
	}
}

func TestRetriedRowAlone(t *testing.T) {
	p := NewPicker(nil, 10)
	p.Offer(1, "a", false)
	p.Offer(2, "k", true)
	p.Offer(3, "k", false)
	p.Offer(4, "a", false)
	if got := p.IDs(); !slices.Equal(got, []int64{1, 2, 4}) {
		t.Fatalf("picked %v, want [1 2 4]: a retried row without the rows of its key behind it", got)
	}
}

func TestWindow(t *testing.T) {
	if Window(1) != 25_000 || Window(1000) != 25_000 || Window(5000) != 125_000 {
		t.Fatalf("Window = %d, %d, %d", Window(1), Window(1000), Window(5000))
	}
}

func TestRun(t *testing.T) {
	if _, err := Run("x", 0, func() (store.Batch, error) { panic("called") }); err == nil || err.Error() != "x: claim: limit is 0: use 1 or more" {
		t.Errorf("Run with limit 0 = %v", err)
	}
	_, err := Run("x", 1, func() (store.Batch, error) { return store.Batch{Lease: 1}, errors.New("boom") })
	if err == nil || err.Error() != "x: claim: boom" {
		t.Errorf("Run of a failing claim = %v", err)
	}
	b, err := Run("x", 1, func() (store.Batch, error) { return store.Batch{Lease: 2}, nil })
	if err != nil || b.Lease != 2 {
		t.Errorf("Run = %+v, %v", b, err)
	}
}

// The rows of keys that dead letters hold are skipped and noted as moves,
// behind their key's dead letter; KeepMoves keeps those whose key is still
// held, behind its current dead letter.
func TestPickerMoves(t *testing.T) {
	p := NewPicker(map[string]struct{}{"h": {}, "g": {}}, 2)
	p.Hold(map[string]int64{"h": 10, "g": 20})
	for _, r := range []struct {
		id  int64
		key string
	}{{1, "h"}, {2, "a"}, {3, "g"}, {4, "h"}, {5, "b"}} {
		if p.Offer(r.id, r.key, false) {
			break
		}
	}
	if got := p.IDs(); !slices.Equal(got, []int64{2, 5}) {
		t.Fatalf("picked %v, want [2 5]", got)
	}
	want := []Move{{1, 10, "h"}, {3, 20, "g"}, {4, 10, "h"}}
	if got := p.Moves(); !slices.Equal(got, want) {
		t.Fatalf("moves %v, want %v", got, want)
	}
	p.KeepMoves(map[string]int64{"h": 11})
	if got, want := p.Moves(), []Move{{1, 11, "h"}, {4, 11, "h"}}; !slices.Equal(got, want) {
		t.Fatalf("moves kept %v, want %v", got, want)
	}
	p.KeepMoves(nil)
	if got := p.Moves(); len(got) != 0 {
		t.Fatalf("moves kept with no key held: %v, want none", got)
	}
}
