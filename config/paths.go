package config

import (
	"os"
	"path/filepath"
)

// One rule for a relative path in a config: it is relative to the directory
// of the file that names it, as include_file's is. The built-in config has
// no file; its relative paths are in StateDir, so that `sipvisor` run from a
// source tree or a home directory leaves no database there.

// pathSettings are the settings whose value is a file name.
var pathSettings = map[string]bool{"tls_certificate": true, "tls_private_key": true, "tls_ca_list": true, "ds_list_file": true}

// StateDir is where the built-in config keeps its files:
// $XDG_STATE_HOME/sipvisor, else ~/.local/state/sipvisor, else sipvisor in
// the temporary directory when there is no home.
func StateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "sipvisor")
	}
	if h, err := os.UserHomeDir(); err == nil && h != "" {
		return filepath.Join(h, ".local", "state", "sipvisor")
	}
	return filepath.Join(os.TempDir(), "sipvisor")
}

// baseDir is the directory a relative path in file is relative to.
func baseDir(file string) string {
	if file == DefaultName || file == "" {
		return StateDir()
	}
	return filepath.Dir(file)
}

// resolvePath makes p, named in file, relative to file's directory.
func resolvePath(p, file string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(baseDir(file), p)
}
