// Package doccheck keeps the repository's Markdown honest about its code
// and its runs, for the tests of every module: a quoted snippet is
// exactly the declarations it names, a relative link reaches a file and
// heading that exist, a quoted figure is its benchmark report's latest
// value, and a promised bound names the tests that check it (figures.go
// describes those markers).
//
// A snippet is a fenced Go block preceded by a marker line
//
//	<!-- snippet: FILE NAME... -->
//
// where FILE is a Go file's path from the repository root and each NAME a
// function, type, variable, constant or Type.Method declared there. The
// block must be those declarations, with their doc comments, in the order
// named, separated by blank lines. Each module checks the markers that
// name its own files (Snippets' owns), so that a module's tests never
// read another module's source, which is absent from its module zip.
package doccheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// marker matches a snippet marker line.
var marker = regexp.MustCompile(`^<!-- snippet: (\S+)((?: \S+)+) -->$`)

// Lines returns the lines of the file at path, or fails t.
func Lines(t testing.TB, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n")
}

// Snippets checks the snippet markers of the Markdown file md (a path from
// root, the repository root) whose FILE owns reports true for, and returns
// how many it checked.
func Snippets(t testing.TB, root, md string, owns func(file string) bool) int {
	t.Helper()
	lines := Lines(t, filepath.Join(root, md))
	checked := 0
	for i := 0; i < len(lines); i++ {
		m := marker.FindStringSubmatch(lines[i])
		if m == nil || !owns(m[1]) {
			continue
		}
		checked++
		if i+1 >= len(lines) || lines[i+1] != "```go" {
			t.Errorf("%s:%d: snippet marker not followed by a ```go block", md, i+1)
			continue
		}
		end := i + 2
		for end < len(lines) && lines[end] != "```" {
			end++
		}
		got := strings.Join(lines[i+2:end], "\n")
		names := strings.Fields(m[2])
		if want := Declarations(t, filepath.Join(root, m[1]), names); got != want {
			t.Errorf("%s:%d quotes %s %v, but it differs; the file has:\n%s", md, i+1, m[1], names, want)
		}
		i = end
	}
	return checked
}

// Declarations returns the source of the named declarations of the Go
// file at path, each with its doc comment, separated by blank lines.
func Declarations(t testing.TB, path string, names []string) string {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	parts := make([]string, 0, len(names))
	for _, name := range names {
		doc, node := find(f, name)
		if node == nil {
			t.Fatalf("%s has no declaration %s", path, name)
		}
		start := node.Pos()
		if doc != nil {
			start = doc.Pos()
		}
		parts = append(parts, string(src[fset.Position(start).Offset:fset.Position(node.End()).Offset]))
	}
	return strings.Join(parts, "\n\n")
}

// find returns the declaration of f named name (Type.Method for a
// method) and its doc comment.
func find(f *ast.File, name string) (*ast.CommentGroup, ast.Node) {
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if funcName(d) == name {
				return d.Doc, d
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				if specNames(spec, name) {
					return d.Doc, d
				}
			}
		}
	}
	return nil, nil
}

// funcName returns a function's name, or Type.Method for a method.
func funcName(d *ast.FuncDecl) string {
	if d.Recv == nil || len(d.Recv.List) != 1 {
		return d.Name.Name
	}
	typ := d.Recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + d.Name.Name
	}
	return d.Name.Name
}

// specNames reports whether spec declares name.
func specNames(spec ast.Spec, name string) bool {
	switch s := spec.(type) {
	case *ast.TypeSpec:
		return s.Name.Name == name
	case *ast.ValueSpec:
		for _, id := range s.Names {
			if id.Name == name {
				return true
			}
		}
	}
	return false
}

var (
	// link matches an inline link's text and target; the text may span lines.
	link = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)
	// codeSpan matches inline code, whose brackets are no links.
	codeSpan = regexp.MustCompile("`[^`\n]*`")
)

// Links checks every relative link of the Markdown file md (a path from
// root, the repository root): its file exists, and its #anchor, if any,
// is a heading of the Markdown file it names. missingOK reports whether a
// missing target may be skipped (a nested module's file, absent from a
// module zip). It returns how many links it checked.
func Links(t testing.TB, root, md string, missingOK func(target string) bool) int {
	t.Helper()
	text := strings.Join(Prose(Lines(t, filepath.Join(root, md))), "\n")
	text = codeSpan.ReplaceAllStringFunc(text, func(s string) string {
		if strings.Contains(s, "](") {
			return ""
		}
		return s
	})
	checked := 0
	for _, m := range link.FindAllStringSubmatch(text, -1) {
		target := m[1]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		checked++
		file, anchor, _ := strings.Cut(target, "#")
		dest := md
		if file != "" {
			dest = path.Clean(path.Join(path.Dir(md), file))
		}
		if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
			if !missingOK(dest) {
				t.Errorf("%s: link %q: %s does not exist", md, target, dest)
			}
			continue
		}
		if anchor != "" && !hasAnchor(t, root, dest, anchor) {
			t.Errorf("%s: link %q: %s has no heading #%s", md, target, dest, anchor)
		}
	}
	return checked
}

// hasAnchor reports whether the Markdown file md has a heading whose
// GitHub anchor is anchor.
func hasAnchor(t testing.TB, root, md, anchor string) bool {
	t.Helper()
	if !strings.HasSuffix(md, ".md") {
		return false
	}
	for _, a := range Anchors(Prose(Lines(t, filepath.Join(root, md)))) {
		if a == anchor {
			return true
		}
	}
	return false
}

// Prose returns lines with the contents of fenced code blocks blanked, so
// that a shell comment is no heading and a slice literal no link.
func Prose(lines []string) []string {
	out := make([]string, len(lines))
	fenced := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out[i] = l
		}
	}
	return out
}

// Anchors returns the GitHub anchors of the headings among lines: lower
// case, punctuation other than '-' and '_' dropped, spaces turned into
// '-', and a repeated anchor numbered (-1, -2, …).
func Anchors(lines []string) []string {
	seen := map[string]int{}
	var out []string
	for _, l := range lines {
		if !strings.HasPrefix(l, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(l, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			seen[a]++
			a += "-" + strconv.Itoa(n)
		} else {
			seen[a] = 1
		}
		out = append(out, a)
	}
	return out
}
