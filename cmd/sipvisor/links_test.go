package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The docs point into each other by heading, and the code points into them
// by section name: a heading renamed or a file moved must not leave a
// reader at a link that goes nowhere. Every relative link of every
// Markdown file must name a file that exists and, after a '#', a heading
// of it; every `FILE.md, "Section"` (or *Section*) in a comment of the code
// must name a heading that starts so.
func TestDocLinksResolve(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	headings := map[string][]string{} // file → its headings' texts
	headingsOf := func(path string) []string {
		if h, ok := headings[path]; ok {
			return h
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var h []string
		for _, line := range outsideFences(string(b)) {
			if strings.HasPrefix(line, "#") {
				h = append(h, strings.TrimSpace(strings.TrimLeft(line, "#")))
			}
		}
		headings[path] = h
		return h
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	cite := regexp.MustCompile(`([A-Za-z0-9_./-]+\.md),? (?:"([^"]+)"|\*([^*]+)\*)`)
	joined := regexp.MustCompile(`\n[ \t]*(?://|#)[ \t]*`)

	var mds, code []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "node_modules" || n == "testdata" || n == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".md":
			mds = append(mds, path)
		case ".go", ".cfg", ".sh":
			code = append(code, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	for _, md := range mds {
		b, err := os.ReadFile(md)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range outsideFences(string(b)) {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				path := md
				if file != "" {
					path = filepath.Join(filepath.Dir(md), file)
				}
				st, err := os.Stat(path)
				if err != nil {
					t.Errorf("%s: link %s: no such file", rel(root, md), target)
					continue
				}
				if anchor == "" || st.IsDir() || filepath.Ext(path) != ".md" {
					continue
				}
				if !hasAnchor(headingsOf(path), anchor) {
					t.Errorf("%s: link %s: %s has no such heading", rel(root, md), target, rel(root, path))
				}
			}
		}
	}

	for _, f := range code {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := joined.ReplaceAllString(string(b), " ")
		for _, m := range cite.FindAllStringSubmatch(text, -1) {
			name, section := m[1], m[2]+m[3]
			path := filepath.Join(root, name)
			if _, err := os.Stat(path); err != nil {
				continue // a file named relative to something else
			}
			found := false
			for _, h := range headingsOf(path) {
				if strings.HasPrefix(strings.ToLower(strings.ReplaceAll(h, "`", "")), strings.ToLower(section)) {
					found = true
					break
				}
			}
			if !found {
				t.Errorf("%s: cites %s, %q: no heading starts so", rel(root, f), name, section)
			}
		}
	}
}

// outsideFences is text's lines that are not inside ``` fences.
func outsideFences(text string) []string {
	var out []string
	in := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			in = !in
			continue
		}
		if !in {
			out = append(out, line)
		}
	}
	return out
}

// hasAnchor reports whether one of headings makes anchor, as GitHub makes
// them: lower case, spaces to hyphens, punctuation dropped, a repeated one
// numbered from -1.
func hasAnchor(headings []string, anchor string) bool {
	seen := map[string]int{}
	for _, h := range headings {
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		s := b.String()
		if n := seen[s]; n > 0 {
			s = fmt.Sprintf("%s-%d", s, n)
		}
		seen[b.String()]++
		if s == anchor {
			return true
		}
	}
	return false
}

func rel(root, path string) string {
	if r, err := filepath.Rel(root, path); err == nil {
		return filepath.ToSlash(r)
	}
	return path
}
