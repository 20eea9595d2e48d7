package idempotency_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/courier-go/courier/idempotency"
)

// repository is where the problem types' page is published; its path
// inside the repository follows.
const repository = "https://github.com/courier-go/courier/blob/main/"

// Every problem type the middleware can answer with has its section in the
// page its type points to, and the page has no section for a type the
// middleware does not send. The types are the constants of type
// problemType, and every call of problem passes one of them.
func TestProblemTypesAreDocumented(t *testing.T) {
	path, ok := strings.CutPrefix(idempotency.ProblemTypes, repository)
	if !ok || strings.Contains(idempotency.ProblemTypes, "#") {
		t.Fatalf("ProblemTypes is %q; want a page of this repository, %s<path>, without a fragment", idempotency.ProblemTypes, repository)
	}
	page, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(path)))
	if err != nil {
		t.Fatalf("ProblemTypes points to %s, which is not in the repository: %v", path, err)
	}
	documented := problemSections(string(page))

	emitted := problemTypes(t)
	if len(emitted) == 0 {
		t.Fatal("found no problemType constants in the package's source")
	}
	for _, name := range emitted {
		if !slices.Contains(documented, name) {
			t.Errorf("problem type %q has no section in %s: add a heading '### %s' under '## Problem types'", name, path, name)
		}
	}
	for _, name := range documented {
		if !slices.Contains(emitted, name) {
			t.Errorf("%s has a section %q, but the middleware sends no such problem type", path, name)
		}
	}
}

// problemSections returns the anchors of the third-level headings under
// "## Problem types", as GitHub forms them.
func problemSections(page string) []string {
	var names []string
	in := false
	for line := range strings.Lines(page) {
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## Problem types"
		case in && strings.HasPrefix(line, "### "):
			names = append(names, anchor(strings.TrimPrefix(line, "### ")))
		}
	}
	return names
}

// anchor is the fragment GitHub gives a heading: lower case, spaces as
// hyphens, punctuation other than hyphens and underscores dropped.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// problemTypes returns the values of the package's problemType constants,
// and fails the test when a call of problem passes anything else.
func problemTypes(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	consts := map[string]string{} // constant name → problem type
	var calls []*ast.CallExpr
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				if typ, ok := n.Type.(*ast.Ident); ok && typ.Name == "problemType" {
					for i, id := range n.Names {
						lit, ok := n.Values[i].(*ast.BasicLit)
						if !ok || lit.Kind != token.STRING {
							t.Fatalf("%s: problemType %s is not a string literal", fset.Position(id.Pos()), id.Name)
						}
						consts[id.Name], _ = strconv.Unquote(lit.Value)
					}
				}
			case *ast.CallExpr:
				if fn, ok := n.Fun.(*ast.Ident); ok && fn.Name == "problem" {
					calls = append(calls, n)
				}
			}
			return true
		})
	}
	if len(calls) == 0 {
		t.Fatal("found no calls of problem in the package's source")
	}
	for _, call := range calls {
		if id, ok := call.Args[2].(*ast.Ident); !ok || consts[id.Name] == "" {
			t.Errorf("%s: problem is called with a type that is not a problemType constant", fset.Position(call.Pos()))
		}
	}
	var values []string
	for _, v := range consts {
		values = append(values, v)
	}
	slices.Sort(values)
	return values
}
