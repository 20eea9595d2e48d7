package courier_test

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The code a reader copies checks every error it gets: the Go blocks of
// the module's Markdown files (README.md, docs/, the examples') and the
// code blocks of its doc comments (what go doc shows). A line of such a
// block fails when
//
//   - it throws away every result of a call: _ = f(…), _, _ = f(…);
//   - it throws away the last result of a call, the error by Go's
//     convention: v, _ := f(…), unless f is one whose last result is a
//     found flag (strings.Cut and its kin);
//   - it starts a goroutine on a method, whose results go nowhere:
//     go x.Run(…) (hand it to an errgroup.Group, or run it in a func
//     literal that handles the error);
//   - it assigns err, and no statement after it looks at err before one
//     assigns it again or the block ends: err := f(…) then x, err := g(…);
//   - it calls, as a statement of its own, a method that returns an error
//     in Courier's API and in database/sql's and pgx's (Write,
//     WriteEvents, Schedule, Cancel, Commit, Start, Handle, Run, Migrate,
//     Publish, Exec, InTx): w.Write(ctx, tx, msg). The syntax does not
//     tell the types, so a call whose first argument is a string literal
//     (mux.Handle("POST /orders", h)) or a test's t (brokertest.Run(t, …))
//     is taken for one of the functions of those names that return
//     nothing.
//
// A deferred call (defer tx.Rollback()) is not flagged: a rollback after
// the commit is meant to fail quietly.
func TestSnippetsCheckErrors(t *testing.T) {
	var bad []string
	for _, b := range codeBlocks(t) {
		for _, p := range problems(b) {
			bad = append(bad, fmt.Sprintf("%s:%d: %s: %s", p.file, p.line, p.why, strings.TrimSpace(p.text)))
		}
	}
	if len(bad) > 0 {
		t.Errorf("%d lines of documented code drop an error; check it (a writer returns it, rolling the transaction back):\n%s",
			len(bad), strings.Join(bad, "\n"))
	}
}

// Relative links of the module's Markdown files (README.md, docs/, the
// examples') name files that exist.
func TestDocLinksResolve(t *testing.T) {
	var bad []string
	for _, file := range markdownFiles(t) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range relativeLinks(string(data)) {
			target := filepath.Join(filepath.Dir(file), filepath.FromSlash(l.target))
			if _, err := os.Stat(target); err != nil {
				bad = append(bad, fmt.Sprintf("%s:%d: %s: no such file", file, l.line, l.target))
			}
		}
	}
	if len(bad) > 0 {
		t.Errorf("%d links point at nothing:\n%s", len(bad), strings.Join(bad, "\n"))
	}
}

// The checks above catch what they are meant to catch, and let through
// what checks its errors.
func TestSnippetRules(t *testing.T) {
	for line, want := range map[string]bool{
		`_ = w.Write(ctx, tx, msg)`:                         true,
		`	_ = tx.Commit() // the order and its message`:     true,
		`_, _ = orders.Start(ctx, tx, orderID, order)`:      true,
		`_, _ = d.Migrate(ctx)`:                             true,
		`_ = st.InTx(ctx, func(tx *memstore.Tx) error {`:    true,
		`db, _ := sqlite.Open("courier.db")`:                true,
		`tx, _ := idempotency.Tx[pgx.Tx](r.Context())`:      true,
		`a, b, _ = f(x)`:                                    true,
		`go orders.Run(ctx, time.Second)`:                   true,
		`w.Write(ctx, tx, msg)`:                             true,
		`tx.Commit()`:                                       true,
		`orders.Handle(ctx, tx, reply)`:                     true,
		`mux.Handle("POST /orders", h)`:                     false,
		`brokertest.Run(t, brokertest.Harness{`:             false,
		`tx.Rollback()`:                                     false,
		`fmt.Println(msg.Topic)`:                            false,
		`if err := w.Write(ctx, tx, msg); err != nil {`:     false,
		`db, err := sqlite.Open("courier.db")`:              false,
		`street, city, _ := strings.Cut(v.Address, ", ")`:   false,
		`v, _ := m[key]`:                                    false,
		`s, _ := v.(string)`:                                false,
		`_ = unused`:                                        false,
		`defer tx.Rollback() // a no-op after the commit`:   false,
		`go func() { errs <- r.Run(ctx) }()`:                false,
		`for _, m := range msgs {`:                          false,
		`// _ = w.Write(ctx, tx, msg) drops the error`:      false,
		`fmt.Println("_ = x()")`:                            false,
		`_, err = tx.Exec(ctx, "INSERT INTO orders …", id)`: false,
	} {
		if got := discardsError(line) != ""; got != want {
			t.Errorf("discardsError(%q) = %v, want %v", line, got, want)
		}
	}
	for block, want := range map[string][]int{
		"x, err := f()\nif err != nil {\n\treturn err\n}":                                                                            nil,
		"x, err := f()\ny, err := g()\nif err != nil {":                                                                              {1},
		"col, err := f()\nreg := r()\n// a comment\nc, err := g(col)\nuse(c, err)":                                                   {1},
		"res, err := ib.Handle(ctx, func(tx T) error {\n\t_, err := tx.Exec()\n\treturn err\n})\n// res …":                           {1},
		"err := w.Cancel(ctx, tx, id) // in another transaction\n// nil: …\nif err != nil && !errors.Is(err, store.ErrAlreadyDue) {": nil,
		"if err := w.Write(ctx, tx, msg); err != nil {\n\treturn err\n}":                                                             nil,
		"err = errors.Join(err, f())\nreturn err":                                                                                    nil,
	} {
		var b []codeLine
		for i, l := range strings.Split(block, "\n") {
			b = append(b, codeLine{line: i + 1, text: l})
		}
		var got []int
		for _, p := range problems(b) {
			got = append(got, p.line)
		}
		if !slices.Equal(got, want) {
			t.Errorf("lines assigning err unchecked in %q: %v, want %v", block, got, want)
		}
	}
	links := relativeLinks("[a](relay/doc.go) [b](https://x.y/z) [c](#quickstart) `[d](not/a/link)`\n" +
		"```\n[e](in/code)\n```\n[f](docs/ops.md#running \"title\") ![g](img/a.png)\n[h]: ref/target.md\n")
	var got []string
	for _, l := range links {
		got = append(got, fmt.Sprintf("%d:%s", l.line, l.target))
	}
	if want := []string{"1:relay/doc.go", "5:docs/ops.md", "5:img/a.png", "6:ref/target.md"}; !slices.Equal(got, want) {
		t.Errorf("relativeLinks = %q, want %q", got, want)
	}
}

var (
	// allBlank: every target of the assignment is blank, and the right
	// side starts with a call.
	allBlank = regexp.MustCompile(`^(_\s*,\s*)*_\s*:?=\s*` + callee + `\(`)
	// lastBlank: the last of several targets is blank.
	lastBlank = regexp.MustCompile(`^[\w.]+\s*(,\s*[\w.]+\s*)*,\s*_\s*:?=\s*(` + callee + `)\(`)
	// goMethod: a goroutine started on a method or function by name.
	goMethod = regexp.MustCompile(`^go\s+` + callee + `\(`)
	// callee is a function or method named by a chain of identifiers, with
	// type arguments.
	callee = `[\pL_][\pL\pN_]*(\.[\pL_][\pL\pN_]*)*(\[[^\]]*\])?`
)

// foundFlags are the functions whose last result reports whether something
// was found, not an error.
var foundFlags = []string{"strings.Cut", "strings.CutPrefix", "strings.CutSuffix", "bytes.Cut", "bytes.CutPrefix", "bytes.CutSuffix"}

// problem is a line of a code block that drops an error, and why.
type problem struct {
	codeLine
	why string
}

// problems returns the lines of block b that drop an error.
func problems(b []codeLine) []problem {
	var out []problem
	for i, l := range b {
		if why := discardsError(l.text); why != "" {
			out = append(out, problem{l, why})
		}
		if text := strings.TrimSpace(l.text); assignsErr.MatchString(text) && unchecked(text, b[i+1:]) {
			out = append(out, problem{l, "err never checked"})
		}
	}
	return out
}

// discardsError says which rule line breaks ("" for none).
func discardsError(line string) string {
	line = strings.TrimSpace(line)
	switch {
	case allBlank.MatchString(line):
		return "every result of the call discarded"
	case goMethod.MatchString(line) && !strings.HasPrefix(line, "go func"):
		return "a goroutine whose results go nowhere"
	}
	if m := lastBlank.FindStringSubmatch(line); m != nil && !slices.Contains(foundFlags, m[2]) {
		return "the call's error discarded"
	}
	if m := bareCall.FindStringSubmatch(line); m != nil && slices.Contains(returnErrors, m[1]) &&
		!strings.HasPrefix(m[2], `"`) && !strings.HasPrefix(m[2], "t,") {
		return "the call's error not checked"
	}
	return ""
}

// assignsErr is a statement that assigns err: err := f(…), x, err = g(…).
var assignsErr = regexp.MustCompile(`^([\w.]+\s*,\s*)*err\s*:?=`)

// unchecked says whether the err that line assigns goes unlooked at by
// the statements after it, rest: the next one to mention err assigns it
// again, or none does before the block (or the one line is in) ends. The
// lines of line's own statement (a function literal it passes) are not
// after it.
func unchecked(line string, rest []codeLine) bool {
	depth := nesting(line)
	for _, l := range rest {
		text := stripComment(strings.TrimSpace(l.text))
		if depth > 0 {
			depth += nesting(text)
			continue
		}
		if depth += nesting(text); depth < 0 {
			return true
		}
		if !mentionsErr.MatchString(text) {
			continue
		}
		if m := assignsErr.FindStringIndex(text); m != nil && !mentionsErr.MatchString(text[m[1]:]) {
			return true
		}
		return false
	}
	return true
}

var (
	mentionsErr = regexp.MustCompile(`\berr\b`)
	lineComment = regexp.MustCompile(`(^|\s)//.*$`)
)

// stripComment returns line without its // comment.
func stripComment(line string) string { return lineComment.ReplaceAllString(line, "") }

// nesting returns how many brackets line opens, less those it closes.
func nesting(line string) int {
	n := 0
	for _, r := range stripComment(line) {
		switch r {
		case '{', '(', '[':
			n++
		case '}', ')', ']':
			n--
		}
	}
	return n
}

// bareCall is a statement that is a call of a method: its name and its
// arguments.
var bareCall = regexp.MustCompile(`^[\pL_][\pL\pN_]*(?:\.[\pL_][\pL\pN_]*)*\.([\pL_][\pL\pN_]*)(?:\[[^\]]*\])?\((.*)$`)

// returnErrors are the methods whose error a statement of their call
// drops.
var returnErrors = []string{"Write", "WriteEvents", "Schedule", "Cancel", "Commit", "Start", "Handle", "Run", "Migrate", "Publish", "Exec", "InTx"}

// codeLine is a line of a code block of the documentation, and where it
// is.
type codeLine struct {
	file string
	line int
	text string
}

// codeBlocks returns the Go blocks of the Markdown files and the code
// blocks of the module's doc comments, each as its lines.
func codeBlocks(t *testing.T) [][]codeLine {
	t.Helper()
	var out [][]codeLine
	for _, file := range markdownFiles(t) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fences(string(data)) {
			if f.lang != "go" {
				continue
			}
			var b []codeLine
			for i, l := range strings.Split(f.text, "\n") {
				b = append(b, codeLine{file, f.line + i, l})
			}
			out = append(out, b)
		}
	}
	err := walkModule(func(path string) error {
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, cg := range docComments(f) {
			var p comment.Parser
			next := 0 // the comment of cg to look from for the next line
			for _, b := range p.Parse(cg.Text()).Content {
				code, ok := b.(*comment.Code)
				if !ok {
					continue
				}
				var b []codeLine
				for _, l := range strings.Split(code.Text, "\n") {
					line := 0
					for i := next; i < len(cg.List) && strings.TrimSpace(l) != ""; i++ {
						if strings.TrimSpace(strings.TrimPrefix(cg.List[i].Text, "//")) == strings.TrimSpace(l) {
							line, next = fset.Position(cg.List[i].Pos()).Line, i+1
							break
						}
					}
					b = append(b, codeLine{path, line, l})
				}
				out = append(out, b)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// docComments returns the doc comments of f: the package's and those of
// its declarations, specs and fields.
func docComments(f *ast.File) []*ast.CommentGroup {
	var out []*ast.CommentGroup
	add := func(cg *ast.CommentGroup) {
		if cg != nil {
			out = append(out, cg)
		}
	}
	add(f.Doc)
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GenDecl:
			add(n.Doc)
		case *ast.FuncDecl:
			add(n.Doc)
			return false
		case *ast.TypeSpec:
			add(n.Doc)
		case *ast.ValueSpec:
			add(n.Doc)
		case *ast.Field:
			add(n.Doc)
		}
		return true
	})
	return out
}

// walkModule calls fn with the path of every file of this module: it
// leaves out directories of other modules (with a go.mod of their own),
// testdata and hidden ones.
func walkModule(fn func(path string) error) error {
	return filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return fn(path)
		}
		if path == "." {
			return nil
		}
		if name := d.Name(); name == "testdata" || strings.HasPrefix(name, ".") || name == "node_modules" {
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
			return filepath.SkipDir
		}
		return nil
	})
}

// markdownFiles returns the module's Markdown files: README.md, docs/,
// the examples'.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := walkModule(func(path string) error {
		if strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// fence is a fenced code block of a Markdown file.
type fence struct {
	lang string
	line int // of its first line of code, from 1
	end  int // the line of its closing fence
	text string
}

// fences returns the fenced code blocks of md (``` or ~~~, indented or
// not).
func fences(md string) []fence {
	var (
		out    []fence
		open   string // the opening fence's marker, while in a block
		cur    fence
		lines  []string
		number int
	)
	sc := bufio.NewScanner(strings.NewReader(md))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		number++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case open == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			open = trimmed[:3]
			lang, _, _ := strings.Cut(strings.TrimLeft(trimmed, "`~"), " ")
			cur, lines = fence{lang: strings.TrimSpace(lang), line: number + 1}, nil
		case open != "" && strings.HasPrefix(trimmed, open) && strings.Trim(trimmed, open[:1]) == "":
			cur.text, cur.end, open = strings.Join(lines, "\n"), number, ""
			out = append(out, cur)
		case open != "":
			lines = append(lines, line)
		}
	}
	return out
}

// link is a relative link of a Markdown file.
type link struct {
	line   int
	target string // without its #fragment
}

var (
	inlineLink = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(\s+"[^"]*")?\s*\)`)
	refLink    = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?`)
	inlineCode = regexp.MustCompile("`+[^`]*`+")
)

// relativeLinks returns the links of md that name a path (not a URL nor a
// fragment of md itself), outside code.
func relativeLinks(md string) []link {
	inCode := map[int]bool{}
	for _, f := range fences(md) {
		for l := f.line - 1; l <= f.end; l++ {
			inCode[l] = true
		}
	}
	var out []link
	for i, line := range strings.Split(md, "\n") {
		if inCode[i+1] {
			continue
		}
		line = inlineCode.ReplaceAllString(line, "")
		var targets []string
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			targets = append(targets, m[1])
		}
		if m := refLink.FindStringSubmatch(line); m != nil {
			targets = append(targets, m[1])
		}
		for _, target := range targets {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") || strings.HasPrefix(target, "#") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			target, _, _ = strings.Cut(target, "?")
			out = append(out, link{i + 1, target})
		}
	}
	return out
}
