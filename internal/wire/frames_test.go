package wire

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestFrameKindsDistinct reads every Frame* constant of the package from
// its source, so that a frame kind added in a file of its own cannot take
// a letter another kind has: a worker would then act on one frame as on
// another.
func TestFrameKindsDistinct(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	seen := map[rune]string{}
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(node ast.Node) bool {
			vs, ok := node.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Frame") || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.CHAR {
					continue
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil || len(s) != 1 {
					t.Fatalf("%s: %s = %s: not one byte", fset.Position(lit.Pos()), name.Name, lit.Value)
				}
				r := rune(s[0])
				if other, dup := seen[r]; dup {
					t.Errorf("%s: %s = %q, which %s already is", fset.Position(lit.Pos()), name.Name, r, other)
				}
				seen[r] = name.Name
				n++
			}
			return true
		})
	}
	if n < 10 {
		t.Fatalf("found %d frame kinds; the test reads the wrong files", n)
	}
}
