package config

import (
	"encoding/json"
	"errors"
	"fmt"
)

// snapshotMagic starts a snapshot file, so LoadFile can tell one from a
// config written by a person.
const snapshotMagic = "#sipvisor-config-snapshot\n"

type snapshot struct {
	Main  string            `json:"main"`
	Files map[string][]byte `json:"files"`
}

// Snapshot is the text of every file the config was read from, in one blob
// that LoadSnapshot (or LoadFile) turns back into the same Config without
// touching the files again. The supervisor hands workers a snapshot of the
// config it validated, so that a file edited or broken since cannot make a
// new worker run something else, or crash at start.
func (c *Config) Snapshot() ([]byte, error) {
	if c.sources == nil {
		return nil, errors.New("config snapshot: config was not loaded from text")
	}
	b, err := json.Marshal(snapshot{Main: c.File, Files: c.sources})
	if err != nil {
		return nil, fmt.Errorf("config snapshot: %w", err)
	}
	return append([]byte(snapshotMagic), b...), nil
}

// LoadSnapshot loads a config from a Snapshot; positions name the original
// files.
func LoadSnapshot(b []byte) (*Config, error) {
	if len(b) < len(snapshotMagic) || string(b[:len(snapshotMagic)]) != snapshotMagic {
		return nil, errors.New("config snapshot: not a snapshot")
	}
	var s snapshot
	if err := json.Unmarshal(b[len(snapshotMagic):], &s); err != nil {
		return nil, fmt.Errorf("config snapshot: %w", err)
	}
	main, ok := s.Files[s.Main]
	if !ok {
		return nil, fmt.Errorf("config snapshot: main file %q missing", s.Main)
	}
	return load(s.Main, main, func(path string) ([]byte, error) {
		if src, ok := s.Files[path]; ok {
			return src, nil
		}
		return nil, fmt.Errorf("%s is not in the snapshot", path)
	})
}
