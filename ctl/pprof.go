package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ProfileNames are the profiles `ctl pprof` takes, of the supervisor or of
// a worker (the supervisor checks that it is the list package internal/wire
// defines).
var ProfileNames = []string{"heap", "allocs", "goroutine", "profile", "block", "mutex", "threadcreate"}

const pprofForm = "pprof PROFILE [-worker ID [-group NAME]] [-seconds N] [-o FILE]"

// PprofResult is what `ctl pprof --json` prints.
type PprofResult struct {
	File    string `json:"file"`
	Bytes   int64  `json:"bytes"`
	Profile string `json:"profile"`
	// Worker is 0 for the supervisor's own profile.
	Worker int    `json:"worker,omitempty"`
	Group  string `json:"group,omitempty"`
	Pid    int    `json:"pid,omitempty"`
}

// pprof fetches a profile from /debug/pprof/ into a file.
func (cmd *command) pprof(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("pprof", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	worker := fs.Int("worker", 0, "")
	group := fs.String("group", "", "")
	seconds := fs.Int("seconds", 0, "")
	out := fs.String("o", "", "")
	var name string
	// PROFILE may come before, between or after the flags: flag stops at
	// the first word that is not one.
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			return usageError{"pprof: " + err.Error()}
		}
		if rest = fs.Args(); len(rest) == 0 {
			break
		}
		if name != "" {
			return usageError{fmt.Sprintf("pprof: one PROFILE, not %q and %q; want %s", name, rest[0], pprofForm)}
		}
		name, rest = rest[0], rest[1:]
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case name == "":
		return usageError{"pprof: no PROFILE given; want " + pprofForm}
	case !slices.Contains(ProfileNames, name):
		msg := fmt.Sprintf("pprof: unknown profile %q: want one of %s", name, strings.Join(ProfileNames, ", "))
		if strings.EqualFold(name, "cpu") {
			msg += ` (the CPU profile is "profile")`
		}
		return usageError{msg}
	case set["worker"] && *worker < 1:
		return usageError{fmt.Sprintf("pprof: -worker %d: want a worker's ID, as in the ID column of `sipvisor ctl ps`", *worker)}
	case set["group"] && !set["worker"]:
		return usageError{"pprof: -group names the group of -worker; give -worker too"}
	case set["seconds"] && name != "profile":
		return usageError{`pprof: -seconds is for the CPU profile ("profile") only`}
	case set["o"] && *out == "":
		return usageError{"pprof: -o: give a file name"}
	}

	path := "/debug/pprof/" + name
	file := name + "-supervisor.pb.gz"
	if set["worker"] {
		path = fmt.Sprintf("/debug/pprof/worker/%d/%s", *worker, name)
		file = fmt.Sprintf("%s-worker-%d.pb.gz", name, *worker)
		if *group != "" {
			file = fmt.Sprintf("%s-%s-worker-%d.pb.gz", name, fileSafe(*group), *worker)
		}
	}
	if set["o"] {
		file = *out
	}
	q := url.Values{}
	if set["seconds"] {
		q.Set("seconds", strconv.Itoa(*seconds))
	}
	if *group != "" {
		q.Set("group", *group)
	}
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	if name == "profile" && cmd.c.http.Timeout > 0 {
		// -timeout bounds the wait beyond the profile's own length, which
		// the server takes as 10 s when not told.
		secs := 10
		if set["seconds"] {
			secs = max(*seconds, 0)
		}
		cmd.c.http.Timeout += time.Duration(secs) * time.Second
	}

	resp, err := cmd.c.send(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody))
		return cmd.c.refusal(resp, raw)
	}
	n, err := saveAtomically(file, resp.Body)
	if err != nil {
		return fmt.Errorf("pprof: %s: %v", file, err)
	}
	res := PprofResult{File: file, Bytes: n, Profile: name}
	if set["worker"] {
		res.Worker = *worker
		res.Group = resp.Header.Get("X-Sipvisor-Group")
		res.Pid, _ = strconv.Atoi(resp.Header.Get("X-Sipvisor-Pid"))
	}
	if cmd.json {
		b, _ := json.MarshalIndent(res, "", "  ")
		_, err := cmd.stdout.Write(append(b, '\n'))
		return err
	}
	kind := name
	if name == "profile" {
		kind = "CPU"
	}
	of := "the supervisor's " + kind + " profile"
	if res.Worker != 0 {
		of = fmt.Sprintf("the %s profile of worker %d (group %s, pid %d)", kind, res.Worker, orDash(res.Group), res.Pid)
	}
	_, err = fmt.Fprintf(cmd.stdout, "wrote %s to %s (%d bytes)\nread it with: go tool pprof -top %s\n", of, file, n, file)
	return err
}

// saveAtomically writes r to a new file and moves it to path only once r
// has ended well, so that a profile cut short never passes for a whole one.
func saveAtomically(path string, r io.Reader) (int64, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = fmt.Errorf("the profile was cut short (%d bytes came): %v", n, err)
		}
		return 0, err
	}
	return n, nil
}

// fileSafe makes a group name (udp:127.0.0.1:5060) fit in a file name.
func fileSafe(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-':
			return r
		}
		return '_'
	}, s)
}
