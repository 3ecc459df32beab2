package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLoad feeds Load arbitrary text, seeded from the golden files: it must
// never panic, and whatever it rejects it must reject with positioned errors.
func FuzzLoad(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.cfgtest"))
	for _, path := range files {
		cfg, _ := splitGolden(f, path)
		f.Add(cfg)
	}
	f.Add(DefaultText)
	f.Fuzz(func(t *testing.T, src string) {
		c, err := Load(filepath.Join("testdata", "fuzz.cfg"), []byte(src))
		if err == nil {
			if c == nil || c.Script == nil {
				t.Fatalf("want a config with a script, have %+v", c)
			}
			return
		}
		errs := []error{err}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			errs = j.Unwrap()
		}
		for _, e := range errs {
			var ce *Error
			if !errors.As(e, &ce) || ce.Pos.Line < 1 || ce.Pos.Col < 1 {
				t.Fatalf("want a positioned *Error, have %#v", e)
			}
			if strings.Contains(ce.Msg, "\n") {
				t.Fatalf("want a one-line message, have %q", ce.Msg)
			}
			if m := grammarWords.FindString(ce.Msg); m != "" {
				t.Fatalf("want the config's words, have %q (%q)", ce.Msg, m)
			}
		}
	})
}
