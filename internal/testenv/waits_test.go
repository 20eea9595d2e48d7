package testenv_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// A wait's failure message shows the state at the failure: what its
// arguments compute must be computed when it fails (testenv.Lazy), not
// when the wait begins, or a slow drain reads as a stalled one. Every
// test file of the module is read; len of a fixed slice is allowed.
func TestWaitsShowTheStateAtTheFailure(t *testing.T) {
	fset := token.NewFileSet()
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "bench" || d.Name() == "tools" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok {
				for _, arg := range earlyArgs(call) {
					t.Errorf("%s: this argument of the wait's failure message is computed before the wait: wrap it in testenv.Lazy",
						fset.Position(arg.Pos()))
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// earlyArgs returns the arguments of call, a call of testenv.Eventually or
// testenv.WhileProgressing, that call a function before the wait begins.
func earlyArgs(call *ast.CallExpr) []ast.Expr {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Eventually" && sel.Sel.Name != "WhileProgressing" || len(call.Args) <= 4 {
		return nil
	}
	var early []ast.Expr
	for _, arg := range call.Args[4:] { // t, a duration, the condition, the message, then its arguments
		c, ok := arg.(*ast.CallExpr)
		if !ok {
			continue
		}
		if s, ok := c.Fun.(*ast.SelectorExpr); ok && s.Sel.Name == "Lazy" {
			continue
		}
		if id, ok := c.Fun.(*ast.Ident); ok && id.Name == "len" {
			continue
		}
		early = append(early, arg)
	}
	return early
}
