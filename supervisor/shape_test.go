package supervisor

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// maxFields is the most fields a struct of this package holds: past it, a
// struct is several parts (doc.go lists the supervisor's) and is split.
const maxFields = 15

// TestStructsStayParts holds the package to its shape: no struct, named or
// not, of its non-test files has more than maxFields fields (each name of
// a field list and each embedded part counts one).
func TestStructsStayParts(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	seen := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			st, ok := n.(*ast.StructType)
			if !ok {
				return true
			}
			seen++
			if c := countFields(st); c > maxFields {
				t.Errorf("%s: struct of %d fields, over %d: split it into parts", fset.Position(st.Pos()), c, maxFields)
			}
			return true
		})
	}
	if seen == 0 {
		t.Fatal("no struct found: the test reads the wrong directory")
	}
}

func countFields(st *ast.StructType) int {
	c := 0
	for _, f := range st.Fields.List {
		c += max(len(f.Names), 1)
	}
	return c
}

func TestCountFields(t *testing.T) {
	for _, c := range []struct {
		src  string
		want int
	}{
		{"struct{}", 0},
		{"struct{ a int }", 1},
		{"struct{ a, b, c int; d string }", 4},
		{"struct{ *T; U; a int }", 3},
	} {
		e, err := parser.ParseExpr(c.src)
		if err != nil {
			t.Fatal(err)
		}
		if got := countFields(e.(*ast.StructType)); got != c.want {
			t.Errorf("%s: %d fields, want %d", c.src, got, c.want)
		}
	}
}
