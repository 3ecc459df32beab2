package config

import (
	"fmt"
	"strings"

	"github.com/sipvisor/sipvisor/script"
)

// The reference tables of docs/CONFIG.md are generated from the settings
// table and from script.Functions and script.PseudoVars; a test compares them
// with the file (and rewrites it with -update), so the docs cannot drift.

func settingsDoc() string {
	var b strings.Builder
	b.WriteString("| setting | kind | default | range | meaning |\n|---|---|---|---|---|\n")
	for _, s := range settings {
		def := s.Default
		if def == "" {
			def = "—"
		} else {
			def = "`" + def + "`"
		}
		rng := s.rangeText()
		if rng == "" {
			rng = "—"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", s.Name, kindNames[s.Kind], def, escapeCell(rng), escapeCell(s.Doc))
	}
	return b.String()
}

func functionsDoc() string {
	var b strings.Builder
	b.WriteString("| function | arguments | meaning |\n|---|---|---|\n")
	for _, n := range script.FunctionNames() {
		f := script.Functions[n]
		args := fmt.Sprint(f.MinArgs)
		if f.MaxArgs != f.MinArgs {
			args += "–" + fmt.Sprint(f.MaxArgs)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", n, args, escapeCell(f.Doc))
	}
	return b.String()
}

func pseudoVarsDoc() string {
	var b strings.Builder
	b.WriteString("| variable | writable | meaning |\n|---|---|---|\n")
	for _, n := range script.PseudoVarNames() {
		v := script.PseudoVars[n]
		name := "$" + n
		if v.HasArg {
			name += "(name)"
		}
		w := "no"
		if v.Writable {
			w = "yes"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", name, w, escapeCell(v.Doc))
	}
	return b.String()
}

func escapeCell(s string) string { return strings.ReplaceAll(s, "|", "\\|") }

// docSections maps each generated section's marker name to its content.
func docSections() map[string]string {
	return map[string]string{
		"settings":    settingsDoc(),
		"functions":   functionsDoc(),
		"pseudo-vars": pseudoVarsDoc(),
	}
}

func beginMarker(name string) string {
	return "<!-- BEGIN " + name + ": generated from the tables in code; go test ./config -update rewrites it -->\n"
}

func endMarker(name string) string { return "<!-- END " + name + " -->" }

// fillDoc replaces the body of each generated section of doc.
func fillDoc(doc string) (string, error) {
	for name, body := range docSections() {
		begin, end := beginMarker(name), endMarker(name)
		i := strings.Index(doc, begin)
		j := strings.Index(doc, end)
		if i < 0 || j < i {
			return "", fmt.Errorf("docs/CONFIG.md lacks the %q markers", name)
		}
		doc = doc[:i+len(begin)] + body + doc[j:]
	}
	return doc, nil
}
