package floodgate_test

import (
	"bufio"
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The README is documentation users copy from: these tests keep it honest
// about the code.

// snippetMarker precedes a README code block that quotes declarations of
// a Go file of this module: <!-- snippet: FILE NAME... -->, where a NAME is
// a function, a type, a variable or Type.Method.
var snippetMarker = regexp.MustCompile(`^<!-- snippet: (\S+)((?: \S+)+) -->$`)

// TestREADMESnippets checks that each quoted code block is exactly the
// declarations it names, with their doc comments, in the order named: the
// README, and the guides of docs/ that quote code, show code that
// compiles and that an Example runs.
func TestREADMESnippets(t *testing.T) {
	if found := checkSnippets(t, "README.md", readREADME(t)); found < 3 {
		t.Errorf("found %d snippet markers in the README, want the three ways to use it at least", found)
	}
	if found := checkSnippets(t, "docs/rates.md", readDoc(t, "docs/rates.md")); found < 2 {
		t.Errorf("found %d snippet markers in docs/rates.md, want SetRate's and PlanLimiter's examples", found)
	}
}

// checkSnippets checks the snippets of one document, and returns how many
// it quotes.
func checkSnippets(t *testing.T, name string, doc []string) int {
	found := 0
	for i := 0; i < len(doc); i++ {
		m := snippetMarker.FindStringSubmatch(doc[i])
		if m == nil {
			continue
		}
		found++
		file, names := m[1], strings.Fields(m[2])
		if i+1 >= len(doc) || doc[i+1] != "```go" {
			t.Errorf("%s line %d: snippet marker not followed by a ```go block", name, i+1)
			continue
		}
		end := i + 2
		for end < len(doc) && doc[end] != "```" {
			end++
		}
		got := strings.Join(doc[i+2:end], "\n")
		want := declarations(t, file, names)
		if got != want {
			t.Errorf("%s line %d quotes %s %v, but it differs; the file has:\n%s", name, i+1, file, names, want)
		}
		i = end
	}
	return found
}

// declarations returns the source of the named declarations of file,
// each with its doc comment, separated by blank lines.
func declarations(t *testing.T, file string, names []string) string {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	text := func(doc *ast.CommentGroup, node ast.Node) string {
		start := node.Pos()
		if doc != nil {
			start = doc.Pos()
		}
		return string(src[fset.Position(start).Offset:fset.Position(node.End()).Offset])
	}
	var parts []string
	for _, name := range names {
		var part string
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				full := d.Name.Name
				if d.Recv != nil && len(d.Recv.List) == 1 {
					typ := d.Recv.List[0].Type
					if star, ok := typ.(*ast.StarExpr); ok {
						typ = star.X
					}
					if id, ok := typ.(*ast.Ident); ok {
						full = id.Name + "." + full
					}
				}
				if full == name {
					part = text(d.Doc, d)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if s.Name.Name == name {
							part = text(d.Doc, d)
						}
					case *ast.ValueSpec:
						for _, id := range s.Names {
							if id.Name == name {
								part = text(d.Doc, d)
							}
						}
					}
				}
			}
		}
		if part == "" {
			t.Fatalf("%s has no declaration %s", file, name)
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, "\n\n")
}

// TestREADMEListsEveryOption checks that every exported option of this
// package (a function returning a type whose name ends in Option) has a
// row in one of the README's option tables.
func TestREADMEListsEveryOption(t *testing.T) {
	var rows strings.Builder
	for _, line := range readREADME(t) {
		if strings.HasPrefix(line, "|") {
			rows.WriteString(line)
			rows.WriteByte('\n')
		}
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
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
			res, ok := fn.Type.Results.List[0].Type.(*ast.Ident)
			if !ok || !strings.HasSuffix(res.Name, "Option") {
				continue
			}
			checked++
			if !strings.Contains(rows.String(), "`"+fn.Name.Name+"(") {
				t.Errorf("the README's option tables have no row for %s (a %s)", fn.Name.Name, res.Name)
			}
		}
	}
	if checked < 20 {
		t.Errorf("found only %d options; is the parser looking at the right package?", checked)
	}
}

// TestREADMEGoVersions checks that the README's module table names every
// module of the repository with the Go version its go.mod requires. (In a
// module zip the nested modules are absent, and only the root is checked.)
func TestREADMEGoVersions(t *testing.T) {
	readme := strings.Join(readREADME(t), "\n")
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (d.Name() == "testdata" || d.Name() == "vendor" ||
			strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_")) {
			return filepath.SkipDir
		}
		if d.Name() != "go.mod" {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		module, goVersion := modDirectives(data)
		if module == "" || goVersion == "" {
			t.Errorf("%s has no module or go directive", path)
			return nil
		}
		row := "| `" + module + "` | " + goMinor(goVersion) + " |"
		if !strings.Contains(readme, row) {
			t.Errorf("the README's module table has no row %q", row)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// modDirectives returns the module path and the go version of a go.mod
// (the root module depends on nothing that parses one, and these two
// directives are single lines).
func modDirectives(data []byte) (module, goVersion string) {
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "module" {
			module = strings.Trim(f[1], `"`)
		}
		if len(f) == 2 && f[0] == "go" {
			goVersion = f[1]
		}
	}
	return module, goVersion
}

// goMinor turns a go directive's version (1.26.0) into the language
// version the README names (1.26).
func goMinor(v string) string {
	if parts := strings.SplitN(v, ".", 3); len(parts) == 3 {
		return parts[0] + "." + parts[1]
	}
	return v
}

func readREADME(t *testing.T) []string {
	t.Helper()
	return readDoc(t, "README.md")
}

// readDoc returns the lines of a Markdown file of the module.
func readDoc(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}
