package redisstore_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/internal/doccheck"
)

// optionFuncs returns the exported functions of the Go package in dir
// (test files left out) that return a type named Option.
func optionFuncs(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !fn.Name.IsExported() || fn.Type.Results == nil || len(fn.Type.Results.List) != 1 {
				continue
			}
			if res, ok := fn.Type.Results.List[0].Type.(*ast.Ident); ok && res.Name == "Option" {
				out = append(out, fn.Name.Name)
			}
		}
	}
	return out
}

// TestREADMEOptionTable checks that the README's table of how options
// carry over names every option of the in-memory limiters (first column)
// and every option of the Redis limiters (second column): a new option
// on either side must say whether it carries over.
func TestREADMEOptionTable(t *testing.T) {
	src, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var mem, redis strings.Builder
	for _, line := range strings.Split(string(src), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 6 || !strings.Contains(line, "`") {
			continue
		}
		mem.WriteString(cells[1])
		redis.WriteString(cells[2])
	}
	for _, c := range []struct {
		dir, column string
		names       []string
		cells       string
	}{
		{"..", "in memory", optionFuncs(t, ".."), mem.String()},
		{".", "on Redis", optionFuncs(t, "."), redis.String()},
	} {
		if len(c.names) < 5 {
			t.Fatalf("found only %d options in %s; is the parser looking at the right package?", len(c.names), c.dir)
		}
		for _, name := range c.names {
			if !strings.Contains(c.cells, "`"+name+"(") {
				t.Errorf("the README's option table has no %q row for %s", c.column, name)
			}
		}
	}
}

// TestDocSnippets checks the snippets of the repository's documentation
// that quote this module's files (the root module checks those quoting
// its own, doccheck.Snippets): the Redis guide's client set-up is code
// that compiles, and that Example_readme runs.
func TestDocSnippets(t *testing.T) {
	if _, err := os.Stat("../docs"); err != nil {
		t.Skip("no ../docs: the repository's guides are not beside this module (a module zip); they are checked in a checkout")
	}
	guides, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	own := func(file string) bool { return strings.HasPrefix(file, "redisstore/") }
	checked := 0
	for _, md := range append([]string{"README.md", "redisstore/README.md"}, guides...) {
		checked += doccheck.Snippets(t, "..", strings.TrimPrefix(md, "../"), own)
	}
	if checked < 1 {
		t.Errorf("found %d snippets quoting redisstore's files, want the Redis guide's client set-up at least", checked)
	}
}
