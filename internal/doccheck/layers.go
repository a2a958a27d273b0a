package doccheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
)

// Forbidden returns where the Go file at path imports one of imports or
// names one of names as a package-level identifier of its own package: a
// type, a receiver, a value. A method, a field or a selector of that name
// (x.Call) is another thing, and is let be. It is the check that a file
// of one layer names nothing of a layer above it.
func Forbidden(path string, names map[string]bool, imports map[string]bool) ([]string, error) {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		return nil, err
	}
	var found []string
	for _, imp := range file.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); imports[p] {
			found = append(found, fset.Position(imp.Pos()).String()+": imports "+p)
		}
	}
	// Inspect visits a node before its children: a name that is a
	// selector's, a method's, a field's or a composite literal key's is
	// marked before it is reached.
	skip := map[*ast.Ident]bool{}
	ast.Inspect(file, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			skip[n.Sel] = true
		case *ast.FuncDecl:
			skip[n.Name] = true
		case *ast.Field:
			for _, name := range n.Names {
				skip[name] = true
			}
		case *ast.KeyValueExpr:
			if id, ok := n.Key.(*ast.Ident); ok {
				skip[id] = true
			}
		case *ast.Ident:
			if names[n.Name] && !skip[n] {
				found = append(found, fset.Position(n.Pos()).String()+": names "+n.Name)
			}
		}
		return true
	})
	return found, nil
}
