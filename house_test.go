package courier_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The house is the module's import graph drawn by folders, a guard that
// keeps its layers in order.
//
// A room is a top-level folder of the module that holds a package: the root
// package (room "courier") is one, each other top-level folder is one with
// every package under it (internal/ and all its packages is one room, cmd/
// another, test/ another). An arrow A → B says that a package of room A
// imports a package of room B in a non-test file (_test.go files are left
// out); its weight is the number of such package imports.
//
// Rooms go on floors, from the ground floor 0 up: a room sits one floor above
// the highest room it imports. That is well defined only where the arrows
// form no cycle. Where they do (a group of rooms that reach each other,
// a strongly connected component), some of the group's arrows must run back
// up, from a lower floor to a higher one. The rooms of such a group are put
// in the order whose arrows running back up weigh least: the fewest package
// imports against the layering (a minimum feedback arc set, weighted by
// imports), then the fewest arrows; of the orders that still tie, the one
// whose set of arrows back up leaves out the smaller of the arrows in which
// the sets differ (arrows compared by room names). Every other arrow then
// runs down, and the floors are the longest paths down over them.
//
// TestHouse fails when an arrow runs back up that allowedBack does not name,
// and when an arrow that allowedBack names no longer runs back up (strike it
// from the list). It also fails when a package other than a test imports
// one of testOnly. With -v it prints the floors and the arrows back up with
// the imports behind them.
func TestHouse(t *testing.T) {
	pkgs := listPackages(t)
	checkTestOnly(t, pkgs)
	h := drawHouse(t, pkgs)
	back := h.backArrows()
	floors := h.floors(back)
	logHouse(t, h, floors, back)
	for _, a := range back {
		if _, ok := allowedBack[a]; !ok {
			t.Errorf("%s → %s runs back up (%s): import the lower room's packages from the higher one, not the other way",
				a[0], a[1], strings.Join(h.imports[a], ", "))
		}
	}
	for a := range allowedBack {
		if !slices.Contains(back, a) {
			t.Errorf("%s → %s no longer runs back up: strike it from allowedBack", a[0], a[1])
		}
	}
}

// allowedBack names the arrows that may run back up, each with the reason it
// does.
var allowedBack = map[arrow]string{
	// The tests' environment starts NATS servers and reads their streams
	// with broker/nats, while broker's packages use internal/'s helpers.
	{"internal", "broker"}: "internal/testenv imports broker, broker/nats and broker/nats/embedded",
}

// testOnly are the module's packages that only tests import: the tests'
// environment (services, servers of their own, waits) stays out of every
// package a program or another package's tests build on, brokertest and
// storetest included.
var testOnly = []string{"internal/testenv"}

// checkTestOnly fails the test for each non-test import of a testOnly
// package.
func checkTestOnly(t *testing.T, pkgs []goPackage) {
	t.Helper()
	mod := pkgs[0].Module.Path
	for _, p := range pkgs {
		for _, imp := range p.Imports {
			if slices.Contains(testOnly, short(mod, imp)) {
				t.Errorf("%s imports %s in a non-test file: only tests may", short(mod, p.ImportPath), short(mod, imp))
			}
		}
	}
}

// arrow is an import from one room (arrow[0]) to another (arrow[1]).
type arrow [2]string

// goPackage is what go list tells of a package.
type goPackage struct {
	ImportPath string
	Imports    []string
	Module     *struct{ Path string }
	Error      *struct{ Err string }
}

// listPackages lists the module's packages with go list.
func listPackages(t *testing.T) []goPackage {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Imports,Module,Error", "./...")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []goPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p goPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list: %v", err)
		}
		if p.Error != nil {
			t.Fatalf("go list: %s: %s", p.ImportPath, p.Error.Err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 || pkgs[0].Module == nil {
		t.Fatal("go list found no package of a module")
	}
	return pkgs
}

// house is the module's rooms and the arrows between them.
type house struct {
	rooms   []string           // sorted
	weight  map[arrow]int      // package imports behind each arrow
	imports map[arrow][]string // those imports, as "from → to" paths in the module
}

// drawHouse draws the house of the module's packages.
func drawHouse(t *testing.T, pkgs []goPackage) *house {
	t.Helper()
	mod := pkgs[0].Module.Path
	room := func(path string) (string, bool) {
		if path == mod {
			return "courier", true
		}
		rel, ok := strings.CutPrefix(path, mod+"/")
		if !ok {
			return "", false
		}
		first, _, _ := strings.Cut(rel, "/")
		return first, true
	}
	h := &house{weight: map[arrow]int{}, imports: map[arrow][]string{}}
	for _, p := range pkgs {
		from, ok := room(p.ImportPath)
		if !ok {
			t.Fatalf("%s is not in module %s", p.ImportPath, mod)
		}
		if !slices.Contains(h.rooms, from) {
			h.rooms = append(h.rooms, from)
		}
		for _, imp := range p.Imports {
			to, ok := room(imp)
			if !ok || to == from {
				continue
			}
			a := arrow{from, to}
			h.weight[a]++
			h.imports[a] = append(h.imports[a], short(mod, p.ImportPath)+" → "+short(mod, imp))
		}
	}
	slices.Sort(h.rooms)
	return h
}

// short is a package's path in the module, "." for the root package.
func short(mod, path string) string {
	if path == mod {
		return "."
	}
	return strings.TrimPrefix(path, mod+"/")
}

// arrowsOf lists the arrows out of room from, sorted.
func (h *house) arrowsOf(from string) []arrow {
	var out []arrow
	for _, to := range h.rooms {
		if a := (arrow{from, to}); h.weight[a] > 0 {
			out = append(out, a)
		}
	}
	return out
}

// groups splits the rooms into strongly connected groups (Tarjan's
// algorithm): rooms that reach each other by arrows share a group.
func (h *house) groups() [][]string {
	index, low := map[string]int{}, map[string]int{}
	onStack := map[string]bool{}
	var stack []string
	var out [][]string
	var visit func(r string)
	visit = func(r string) {
		index[r], low[r] = len(index), len(index)
		stack = append(stack, r)
		onStack[r] = true
		for _, a := range h.arrowsOf(r) {
			if _, seen := index[a[1]]; !seen {
				visit(a[1])
				low[r] = min(low[r], low[a[1]])
			} else if onStack[a[1]] {
				low[r] = min(low[r], index[a[1]])
			}
		}
		if low[r] != index[r] {
			return
		}
		var g []string
		for {
			top := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			onStack[top] = false
			g = append(g, top)
			if top == r {
				break
			}
		}
		slices.Sort(g)
		out = append(out, g)
	}
	for _, r := range h.rooms {
		if _, seen := index[r]; !seen {
			visit(r)
		}
	}
	return out
}

// backSet is a set of arrows running back up and what it weighs.
type backSet struct {
	weight int     // package imports
	arrows []arrow // sorted
}

// less reports whether s is the better set of arrows back up: it weighs
// less, has fewer arrows, or, of two sets alike in both, leaves out the
// smallest arrow in which they differ.
func (s backSet) less(o backSet) bool {
	if s.weight != o.weight {
		return s.weight < o.weight
	}
	if len(s.arrows) != len(o.arrows) {
		return len(s.arrows) < len(o.arrows)
	}
	for i := range s.arrows {
		if s.arrows[i] != o.arrows[i] {
			// The smaller arrow is in one set only: the other set wins.
			return compareArrows(s.arrows[i], o.arrows[i]) > 0
		}
	}
	return false
}

// compareArrows orders arrows by their rooms' names.
func compareArrows(a, b arrow) int {
	if c := strings.Compare(a[0], b[0]); c != 0 {
		return c
	}
	return strings.Compare(a[1], b[1])
}

// backArrows finds the arrows that run back up: in each strongly connected
// group, the least set by backSet.less over every order of the group's rooms.
// The search goes over the subsets of the group, placed from the ground up
// (a room put on top of a subset makes every arrow into it from the subset
// run back up), so a group may hold up to some twenty rooms.
func (h *house) backArrows() []arrow {
	var back []arrow
	for _, g := range h.groups() {
		if len(g) == 1 {
			continue
		}
		best := make([]*backSet, 1<<len(g))
		best[0] = &backSet{}
		for set := range best {
			if best[set] == nil {
				continue
			}
			for v, top := range g {
				if set&(1<<v) != 0 {
					continue
				}
				next := backSet{weight: best[set].weight, arrows: slices.Clone(best[set].arrows)}
				for u, below := range g {
					if a := (arrow{below, top}); set&(1<<u) != 0 && h.weight[a] > 0 {
						next.weight += h.weight[a]
						next.arrows = append(next.arrows, a)
					}
				}
				slices.SortFunc(next.arrows, compareArrows)
				if s := set | 1<<v; best[s] == nil || next.less(*best[s]) {
					best[s] = &next
				}
			}
		}
		back = append(back, best[len(best)-1].arrows...)
	}
	slices.SortFunc(back, compareArrows)
	return back
}

// floors places each room one floor above the highest room it imports by an
// arrow that does not run back up.
func (h *house) floors(back []arrow) map[string]int {
	floor := map[string]int{}
	var place func(r string) int
	place = func(r string) int {
		if f, ok := floor[r]; ok {
			return f
		}
		f := 0
		for _, a := range h.arrowsOf(r) {
			if !slices.Contains(back, a) {
				f = max(f, place(a[1])+1)
			}
		}
		floor[r] = f
		return f
	}
	for _, r := range h.rooms {
		place(r)
	}
	return floor
}

// logHouse prints the floors, top floor first, and the arrows back up.
func logHouse(t *testing.T, h *house, floor map[string]int, back []arrow) {
	top := 0
	for _, f := range floor {
		top = max(top, f)
	}
	var b strings.Builder
	arrows := "arrows"
	if len(back) == 1 {
		arrows = "arrow"
	}
	fmt.Fprintf(&b, "%d rooms on %d floors, %d %s back up\n", len(h.rooms), top+1, len(back), arrows)
	for f := top; f >= 0; f-- {
		var on []string
		for _, r := range h.rooms {
			if floor[r] == f {
				on = append(on, r)
			}
		}
		fmt.Fprintf(&b, "  floor %d: %s\n", f, strings.Join(on, " "))
	}
	for _, a := range back {
		fmt.Fprintf(&b, "  back up: %s → %s (floor %d → %d): %s\n", a[0], a[1], floor[a[0]], floor[a[1]],
			strings.Join(h.imports[a], ", "))
	}
	t.Log(b.String())
}
