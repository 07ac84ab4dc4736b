package bridge

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// The snapshot's phase moves only in machine.go (doc.go draws its map); a
// new Supervisor starts Pending. This test fails when any other file of the
// package assigns a phase.
func TestPhaseIsWrittenOnlyInMachineGo(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || name == "machine.go" {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				for _, lhs := range n.Lhs {
					if sel, ok := lhs.(*ast.SelectorExpr); ok && sel.Sel.Name == "Phase" {
						t.Errorf("%s: the phase is assigned outside machine.go", fset.Position(n.Pos()))
					}
				}
			case *ast.KeyValueExpr:
				key, ok := n.Key.(*ast.Ident)
				if !ok || key.Name != "Phase" {
					return true
				}
				if v, ok := n.Value.(*ast.SelectorExpr); !ok || v.Sel.Name != "PhasePending" {
					t.Errorf("%s: a snapshot starts in a phase other than Pending outside machine.go", fset.Position(n.Pos()))
				}
			}
			return true
		})
	}
}
