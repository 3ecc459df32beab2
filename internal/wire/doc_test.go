package wire

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The package doc is the protocol's only description a reader of either side
// gets, so every frame kind, control kind, environment variable, descriptor
// note and call declared in this package must appear in it, spelled as the code
// spells it. A kind added without a word in the doc fails here.
func TestDocNamesEveryProtocolElement(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	var doc string
	type constant struct{ name, value string }
	var consts []constant
	var notes []string
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if f.Doc != nil {
			doc += f.Doc.Text()
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				if d.Tok != token.CONST {
					continue
				}
				for _, spec := range d.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, id := range vs.Names {
						if i < len(vs.Values) {
							if lit, ok := vs.Values[i].(*ast.BasicLit); ok {
								consts = append(consts, constant{id.Name, lit.Value})
							}
						}
					}
				}
			case *ast.FuncDecl:
				n := d.Name.Name
				if d.Recv == nil && d.Name.IsExported() && !strings.HasPrefix(n, "Parse") &&
					(strings.HasSuffix(n, "Note") || strings.HasSuffix(n, "Request")) {
					notes = append(notes, n)
				}
			}
		}
	}
	if doc == "" {
		t.Fatal("the package has no doc comment")
	}
	// Collapse the doc's line breaks and indentation so a phrase may wrap.
	flat := strings.Join(strings.Fields(doc), " ")
	checked := 0
	for _, c := range consts {
		var want []string
		switch {
		case strings.HasPrefix(c.name, "Frame"), strings.HasPrefix(c.name, "Ctl"):
			// A kind is named by its byte and what it means: "'M' SIP message".
			want = []string{c.value + " "}
		case strings.HasPrefix(c.name, "Env"):
			s, err := strconv.Unquote(c.value)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			want = []string{s}
		case strings.HasPrefix(c.name, "FD"):
			want = []string{"fd " + c.value + " "}
			if c.name == "FDSockets" {
				want = []string{"fd " + c.value + "…"}
			}
		default:
			continue
		}
		checked++
		found := false
		for _, w := range want {
			if strings.Contains(flat, w) {
				found = true
			}
		}
		if !found {
			t.Errorf("the package doc does not name %s (%s): want %q in it", c.name, c.value, want[0])
		}
	}
	for _, n := range notes {
		checked++
		if !regexp.MustCompile(`\b` + n + `\b`).MatchString(flat) {
			t.Errorf("the package doc does not name the note or call %s", n)
		}
	}
	// The test must have found what it checks: a rename of the constants'
	// prefixes would otherwise make it pass on nothing.
	if checked < 20 {
		t.Fatalf("checked only %d protocol elements; the test no longer recognises the declarations", checked)
	}
	if _, err := os.Stat("doc.go"); err != nil {
		t.Fatalf("the protocol is described in doc.go: %v", err)
	}
}
