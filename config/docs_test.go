package config

import (
	"os"
	"path/filepath"
	"testing"
)

func TestDocsMatchTables(t *testing.T) {
	t.Parallel()
	path := filepath.Join("..", "docs", "CONFIG.md")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := fillDoc(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if want != string(raw) {
		t.Errorf("docs/CONFIG.md is out of date with the settings or function tables; run go test ./config -update and review the diff")
	}
}
