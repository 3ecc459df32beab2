package engine

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sipvisor/sipvisor/config"
)

// Reload takes the script of a file that loads and keeps the running one
// when the file does not load.
func TestReload(t *testing.T) {
	t.Parallel()
	text := func(reason string) string {
		return "route {\n\tsl_send_reply(200, \"" + reason + "\");\n}\n"
	}
	c, err := config.Load("v1.cfg", []byte(text("v1")))
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWorker(Options{Script: c.Script})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	v2 := filepath.Join(dir, "v2.cfg")
	if err := os.WriteFile(v2, []byte(text("v2")), 0o644); err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(dir, "broken.cfg")
	if err := os.WriteFile(broken, []byte("route {\n\tsl_send_reply(200, \"v3\")\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := scriptText(w); !strings.Contains(got, `"v1"`) || strings.Contains(got, `"v2"`) {
		t.Fatalf("want the v1 script to begin with, have %s", got)
	}
	if err := w.Reload(v2); err != nil {
		t.Fatalf("reload v2: %v", err)
	}
	if got := scriptText(w); !strings.Contains(got, `"v2"`) {
		t.Fatalf("want the v2 script after the reload, have %s", got)
	}
	if err := w.Reload(broken); err == nil || !strings.Contains(err.Error(), "broken.cfg:") {
		t.Fatalf("want the broken file refused with its position, have %v", err)
	}
	if got := scriptText(w); !strings.Contains(got, `"v2"`) {
		t.Fatalf("want the v2 script kept after a failed reload, have %s", got)
	}
	if err := w.Reload(filepath.Join(dir, "missing.cfg")); err == nil {
		t.Fatal("want a missing file refused")
	}
}

// scriptText is the worker's main route as JSON, literals included.
func scriptText(w *Worker) string {
	b, _ := json.Marshal(w.opt.Script.Routes[""])
	return string(b)
}
