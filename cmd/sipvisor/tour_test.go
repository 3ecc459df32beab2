package main

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// README's tour of the tree is a newcomer's map: it must name every folder
// that holds Go code, name none that is gone, and every package it names
// must say in its doc comment what it owns.
func TestReadmeTourMatchesTheTree(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	start := strings.Index(text, "### A tour of the tree")
	if start < 0 {
		t.Fatal("README.md has no \"### A tour of the tree\" section")
	}
	end := strings.Index(text[start+1:], "\n### ")
	if end < 0 {
		t.Fatal("the tour section has no end (the next ### heading)")
	}
	tour := text[start : start+1+end]
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z][a-z0-9_/.]*)/`").FindAllStringSubmatch(tour, -1) {
		named[m[1]] = true
	}
	if len(named) < 10 {
		t.Fatalf("the tour names %d folders; the pattern no longer reads it", len(named))
	}

	goDirs := map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			base := d.Name()
			if rel != "." && (strings.HasPrefix(base, ".") || base == "testdata" || base == "results" || base == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") {
			goDirs[filepath.ToSlash(filepath.Dir(rel))] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for dir := range goDirs {
		// cmd/ names its binaries in one line.
		if dir == "." || strings.HasPrefix(dir, "cmd/") {
			continue
		}
		if !named[dir] {
			missing = append(missing, dir+"/")
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("README's tour does not name these folders of Go code: %v", missing)
	}
	for dir := range named {
		if _, err := os.Stat(filepath.Join(root, dir)); err != nil {
			t.Errorf("README's tour names %s/, which does not exist", dir)
		}
	}

	// Every package says what it owns.
	fset := token.NewFileSet()
	for dir := range goDirs {
		if dir == "." {
			continue
		}
		entries, err := os.ReadDir(filepath.Join(root, dir))
		if err != nil {
			t.Fatal(err)
		}
		doc, name := "", ""
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(root, dir, e.Name()), nil, parser.ParseComments|parser.PackageClauseOnly)
			if err != nil {
				t.Fatalf("%s: %v", dir, err)
			}
			name = f.Name.Name
			if f.Doc != nil {
				doc += f.Doc.Text()
			}
		}
		if name != "" && len(strings.Fields(doc)) < 8 {
			t.Errorf("package %s (%s/) has no doc comment saying what it owns", name, dir)
		}
	}
}
