package watermark

import (
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestReadSystemMemory(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		root string
		want float64
		err  string // error fragment; "" for success
	}{
		{root: "host", want: 86.2},
		{root: "container", want: 78.125}, // (900 MiB − 100 MiB inactive file) of 1 GiB
		{root: "unlimited", want: 86.2},
		{root: "big_limit", want: 86.2}, // the machine runs out before the limit
		{root: "no_available", err: "no MemAvailable line"},
		{root: "garbled", err: `line 1: MemTotal: strconv.ParseUint: parsing "lots"`},
		{root: "no_current", err: "read cgroup memory use"},
		{root: "bad_max", err: `want a byte count, have "1G"`},
		{root: "no_stat", err: "read cgroup memory stat"},
		{root: "empty_root", err: "read system memory"},
	} {
		t.Run(tc.root, func(t *testing.T) {
			have, err := ReadSystemMemory(filepath.Join("testdata", tc.root))
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("want error %q, have %v (value %v)", tc.err, err, have)
				}
			case err != nil:
				t.Fatalf("want %v, have error %v", tc.want, err)
			case math.Abs(have-tc.want) > 1e-9:
				t.Fatalf("want %v, have %v", tc.want, have)
			}
		})
	}
}

// TestReadSystemMemoryLive reads this machine's own files.
func TestReadSystemMemoryLive(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	have, err := ReadSystemMemory("/")
	if err != nil {
		t.Fatal(err)
	}
	if !(have > 0 && have <= 100) {
		t.Fatalf("want a percent in (0, 100], have %v", have)
	}
}

func TestParseMeminfo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		in        string
		total, av uint64
		err       string
	}{
		{name: "ok", in: "MemTotal: 1000 kB\nMemFree: 1 kB\nMemAvailable: 250 kB\n", total: 1024000, av: 256000},
		{name: "order does not matter", in: "MemAvailable: 250 kB\nMemTotal: 1000 kB\n", total: 1024000, av: 256000},
		{name: "no unit", in: "MemTotal: 1000\nMemAvailable: 250\n", total: 1024000, av: 256000},
		{name: "empty", in: "", err: "no MemTotal line"},
		{name: "no colon", in: "MemTotal 1000 kB\n", err: `line 1: no colon in "MemTotal 1000 kB"`},
		{name: "wrong unit", in: "MemTotal: 1000 MB\n", err: `line 1: want MemTotal: N kB, have "MemTotal: 1000 MB"`},
		{name: "negative", in: "MemTotal: 1000 kB\nMemAvailable: -5 kB\n", err: "line 2: MemAvailable: strconv.ParseUint"},
		{name: "zero total", in: "MemTotal: 0 kB\nMemAvailable: 0 kB\n", err: "MemTotal is 0"},
		{name: "available over total", in: "MemTotal: 10 kB\nMemAvailable: 20 kB\n", err: "MemAvailable 20 kB exceeds MemTotal 10 kB"},
		{name: "huge", in: "MemTotal: 99999999999999999 kB\n", err: "line 1: MemTotal 99999999999999999 kB is out of range"},
		{name: "tabs", in: "MemTotal:\t1000\tkB\nMemAvailable:\t250 kB\n", total: 1024000, av: 256000},
		{name: "three fields", in: "MemTotal: 1000 kB more\n", err: `line 1: want MemTotal: N kB, have "MemTotal: 1000 kB more"`},
		{name: "no number", in: "MemTotal:   \nMemAvailable: 250 kB\n", err: `line 1: want MemTotal: N kB, have "MemTotal:   "`},
		{name: "no newline at the end", in: "MemTotal: 1000 kB\nMemAvailable: 250 kB", total: 1024000, av: 256000},
		// Read up to the later of the two: what follows is not its concern.
		{name: "lines after both unread", in: "MemTotal: 1000 kB\nMemAvailable: 250 kB\nno colon\n", total: 1024000, av: 256000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			total, av, err := parseMeminfo([]byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("want error %q, have %v", tc.err, err)
				}
				return
			}
			if err != nil || total != tc.total || av != tc.av {
				t.Fatalf("want %d %d, have %d %d %v", tc.total, tc.av, total, av, err)
			}
		})
	}
}

func TestParseCgroupMax(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		limit   uint64
		limited bool
		err     string
	}{
		{in: "max\n"},
		{in: "1073741824\n", limit: 1 << 30, limited: true},
		{in: "0\n", err: "memory limit is 0"},
		{in: "", err: "empty file"},
		{in: "-1", err: `want a byte count, have "-1"`},
	} {
		limit, limited, err := parseCgroupMax([]byte(tc.in))
		if errString(err) != tc.err && !(tc.err != "" && err != nil && strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%q: want error %q, have %v", tc.in, tc.err, err)
		}
		if limit != tc.limit || limited != tc.limited {
			t.Errorf("%q: want %d %v, have %d %v", tc.in, tc.limit, tc.limited, limit, limited)
		}
	}
}

func TestParseInactiveFile(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want uint64
		err  string
	}{
		{in: "anon 5\ninactive_file 42\nactive_file 7\n", want: 42},
		{in: "anon 5\n", err: "no inactive_file line"},
		{in: "inactive_file x\n", err: "line 1: inactive_file"},
	} {
		have, err := parseInactiveFile([]byte(tc.in))
		if have != tc.want || (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%q: want %d %q, have %d %v", tc.in, tc.want, tc.err, have, err)
		}
	}
}

// TestParseMeminfoAllocatesNothing: the parse runs every cycle.
func TestParseMeminfoAllocatesNothing(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "host", "proc", "meminfo"))
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		if _, _, err := parseMeminfo(b); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("want no allocation, have %v", n)
	}
}

// FuzzParseMeminfo checks that no input makes the parser panic or return a
// used share outside 0–100 %.
func FuzzParseMeminfo(f *testing.F) {
	f.Add([]byte("MemTotal: 1000 kB\nMemAvailable: 250 kB\n"))
	f.Add([]byte("MemTotal: 0 kB\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		total, av, err := parseMeminfo(b)
		if err != nil {
			return
		}
		if p := percent(total-av, total); p < 0 || p > 100 {
			t.Fatalf("used %v%% from %q", p, b)
		}
	})
}

// copyTree copies the fixture tree testdata/name under dst.
func copyTree(t *testing.T, name, dst string) {
	t.Helper()
	src := filepath.Join("testdata", name)
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestMemoryReaderKeepsFile reads meminfo through the descriptor it keeps:
// what the file says now, not what it said at the open, however long.
func TestMemoryReaderKeepsFile(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	copyTree(t, "host", root)
	r := NewMemoryReader(root)
	defer r.Close()
	now := time.Unix(1000, 0)
	read := func(want float64) {
		t.Helper()
		have, err := r.Read(now)
		if err != nil || math.Abs(have-want) > 1e-9 {
			t.Fatalf("want %v, have %v %v", want, have, err)
		}
	}
	read(86.2)
	meminfo := filepath.Join(root, "proc", "meminfo")
	if err := os.WriteFile(meminfo, []byte("MemTotal: 1000 kB\nMemAvailable: 250 kB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	read(75)
	// Longer than the first buffer: read whole all the same.
	long := "MemTotal: 1000 kB\n" + strings.Repeat("Padding: 1 kB\n", 1000) + "MemAvailable: 900 kB\n"
	if err := os.WriteFile(meminfo, []byte(long), 0o644); err != nil {
		t.Fatal(err)
	}
	read(10)
	// Closed, it opens the file again.
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	read(10)
	// A file gone is an error, never a figure.
	r.Close()
	if err := os.Remove(meminfo); err != nil {
		t.Fatal(err)
	}
	if have, err := r.Read(now); err == nil || !strings.Contains(err.Error(), "read system memory") {
		t.Fatalf("want a read error, have %v %v", have, err)
	}
}

// TestMemoryReaderCgroupRecheck looks for an absent memory.max again only
// CgroupRecheck after it found none; a present one it reads every time.
func TestMemoryReaderCgroupRecheck(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	copyTree(t, "container", root)
	cgroup := filepath.Join(root, "sys", "fs", "cgroup")
	held := filepath.Join(root, "held")
	if err := os.Rename(cgroup, held); err != nil {
		t.Fatal(err)
	}
	r := NewMemoryReader(root)
	defer r.Close()
	t0 := time.Unix(1000, 0)
	for _, step := range []struct {
		at    time.Duration
		do    func()
		want  float64
		about string
	}{
		{at: 0, want: 25, about: "no cgroup: the host's figure"},
		{at: time.Second, do: func() { must(t, os.Rename(held, cgroup)) }, want: 25, about: "a limit that came is not looked for yet"},
		{at: CgroupRecheck - time.Nanosecond, want: 25, about: "nor just before the recheck"},
		{at: CgroupRecheck, want: 78.125, about: "at the recheck it is read"},
		{at: CgroupRecheck + time.Second, do: func() {
			must(t, os.WriteFile(filepath.Join(cgroup, "memory.current"), []byte("1073741824\n"), 0o644))
		}, want: 90.234375, about: "a present limit is read at every Read"},
	} {
		if step.do != nil {
			step.do()
		}
		have, err := r.Read(t0.Add(step.at))
		if err != nil || math.Abs(have-step.want) > 1e-9 {
			t.Fatalf("%s: want %v, have %v %v", step.about, step.want, have, err)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
