package floodgate_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/internal/doccheck"
)

// The README and the guides in docs/ are documentation users copy from:
// these tests keep them honest about the code.

// guides returns the Markdown files this module documents itself in: the
// README, then the guides of docs/.
func guides(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 5 {
		t.Fatalf("found %d guides in docs/, want the README's guides", len(docs))
	}
	return append([]string{"README.md"}, docs...)
}

// ownFile reports whether the Go file at path (from the module root)
// belongs to this module, so that a snippet quoting it is checked here. A
// file of a nested module (a directory with its own go.mod, or one absent
// from this module's zip) is checked by that module's own tests.
func ownFile(path string) bool {
	for dir := filepath.Dir(filepath.FromSlash(path)); dir != "."; dir = filepath.Dir(dir) {
		if _, err := os.Stat(dir); err != nil {
			return false
		}
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return false
		}
	}
	return true
}

// TestREADMESnippets checks that each quoted code block of the README and
// the guides is exactly the declarations it names, with their doc
// comments, in the order named (doccheck.Snippets): the documentation
// shows code that compiles and that an Example runs. Blocks quoting a
// nested module's files are checked by that module's tests.
func TestREADMESnippets(t *testing.T) {
	total := 0
	for _, md := range guides(t) {
		n := doccheck.Snippets(t, ".", md, ownFile)
		if md == "README.md" && n < 3 {
			t.Errorf("found %d snippet markers in the README, want the smallest program and the ways to use it at least", n)
		}
		total += n
	}
	if total < 8 {
		t.Errorf("found %d snippet markers in the README and docs/, want every guide's examples", total)
	}
}

// TestDocLinks checks that every relative link of the repository's
// Markdown (the README, the guides, MIGRATING.md, the nested modules'
// READMEs) reaches a file that exists and, for an #anchor, a heading of
// it. A link into a nested module absent from this module's zip is let
// be.
func TestDocLinks(t *testing.T) {
	var files []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (d.Name() == "testdata" || d.Name() == "vendor" ||
			strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, filepath.ToSlash(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	modules := nestedModules(t)
	absentModule := func(target string) bool {
		for _, dir := range modules {
			if strings.HasPrefix(target, dir+"/") {
				_, err := os.Stat(filepath.Join(dir, "go.mod"))
				return err != nil
			}
		}
		return false
	}
	checked := 0
	for _, md := range files {
		checked += doccheck.Links(t, ".", md, absentModule)
	}
	if checked < 50 {
		t.Errorf("checked %d links in %d Markdown files; is the walk looking at the repository?", checked, len(files))
	}
}

// nestedModules returns the directories of the nested modules that the
// README's module table names.
func nestedModules(t *testing.T) []string {
	t.Helper()
	const prefix = "| `github.com/floodgate-go/floodgate/"
	var dirs []string
	for _, line := range readREADME(t) {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			if dir, _, ok := strings.Cut(rest, "`"); ok {
				dirs = append(dirs, dir)
			}
		}
	}
	return dirs
}

// TestREADMEListsEveryOption checks that every exported option of this
// package (a function returning a type whose name ends in Option) has a
// row in one of the option tables of the README or the guides.
func TestREADMEListsEveryOption(t *testing.T) {
	var rows strings.Builder
	for _, md := range guides(t) {
		for _, line := range doccheck.Lines(t, md) {
			if strings.HasPrefix(line, "|") {
				rows.WriteString(line)
				rows.WriteByte('\n')
			}
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
				t.Errorf("the option tables of the README and docs/ have no row for %s (a %s)", fn.Name.Name, res.Name)
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
	return doccheck.Lines(t, "README.md")
}

// TestREADMETestCommand checks that CI (.ci/run and the public workflow)
// runs the test command the README's set-up gives, so that the README's
// promise about it is a promise about what CI runs.
func TestREADMETestCommand(t *testing.T) {
	var command string
	inSetup, fenced := false, false
	for _, line := range readREADME(t) {
		switch {
		case strings.HasPrefix(line, "## "):
			inSetup = line == "## Set-up"
		case inSetup && strings.HasPrefix(line, "```"):
			fenced = !fenced
		case inSetup && fenced && strings.HasPrefix(line, "scripts/"):
			command = strings.Fields(line)[0]
		}
	}
	if command == "" {
		t.Fatal("the README's set-up gives no scripts/ test command")
	}
	for _, ci := range []string{".ci/run", ".github/workflows/ci.yml"} {
		data, err := os.ReadFile(ci)
		if os.IsNotExist(err) {
			t.Logf("%s absent (a module zip): not checked", ci)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		runs := false
		for _, line := range strings.Split(string(data), "\n") {
			line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "run:"))
			runs = runs || line == command
		}
		if !runs {
			t.Errorf("%s has no line running the README's test command %s", ci, command)
		}
	}
}

// TestREADMELinksEveryGuide checks that the README links every guide of
// docs/, so that none is written and then lost.
func TestREADMELinksEveryGuide(t *testing.T) {
	readme := strings.Join(readREADME(t), "\n")
	for _, md := range guides(t)[1:] {
		if !strings.Contains(readme, "]("+filepath.ToSlash(md)+")") {
			t.Errorf("the README does not link %s", md)
		}
	}
}

// TestQuotedFiles checks each block of the README and the guides marked
// <!-- file: PATH --> (the example server's policy files): it is the
// file at PATH, whole, so that what a reader copies is what the tests
// load.
func TestQuotedFiles(t *testing.T) {
	quoted := 0
	for _, md := range guides(t) {
		text, err := os.ReadFile(md)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(text), "\n")
		for i, line := range lines {
			path, ok := strings.CutPrefix(line, "<!-- file: ")
			if !ok {
				continue
			}
			path = strings.TrimSuffix(path, " -->")
			quoted++
			if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "```") {
				t.Errorf("%s:%d: a file marker not followed by a code block", md, i+1)
				continue
			}
			end := i + 2
			for end < len(lines) && lines[end] != "```" {
				end++
			}
			want, err := os.ReadFile(filepath.FromSlash(path))
			if err != nil {
				t.Errorf("%s:%d: %v", md, i+1, err)
				continue
			}
			if got := strings.Join(lines[i+2:end], "\n"); got != strings.TrimRight(string(want), "\n") {
				t.Errorf("%s:%d quotes %s, but the file differs; it has:\n%s", md, i+1, path, want)
			}
		}
	}
	if quoted < 4 {
		t.Errorf("found %d quoted files, want both scenarios' policy files in the README and in docs/policy-file.md", quoted)
	}
}
