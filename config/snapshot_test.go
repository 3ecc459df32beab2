package config

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// A snapshot loads into the same config after its files changed or broke.
func TestSnapshotOutlivesItsFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	main := filepath.Join(dir, "main.cfg")
	inc := filepath.Join(dir, "routes.cfg")
	os.WriteFile(inc, []byte("route { exit; }\n"), 0o644)
	os.WriteFile(main, []byte("socket = udp:127.0.0.1:5060\nudp_workers = 3\ninclude_file \"routes.cfg\"\n"), 0o644)
	c, err := LoadFile(main)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(inc, []byte("route { broken"), 0o644)
	os.Remove(main)
	path := filepath.Join(dir, "snap")
	os.WriteFile(path, snap, 0o600)
	again, err := LoadFile(path)
	if err != nil {
		t.Fatalf("want the snapshot to load, have %v", err)
	}
	again.sources, c.sources = nil, nil
	if !reflect.DeepEqual(again, c) {
		t.Fatalf("want the same config from the snapshot\nwant %+v\nhave %+v", c, again)
	}
	if _, err := LoadSnapshot([]byte("route {}")); err == nil {
		t.Fatal("want an error for text that is not a snapshot")
	}
}
