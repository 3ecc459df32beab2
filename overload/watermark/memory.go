package watermark

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sipvisor/sipvisor/internal/rawio"
	"golang.org/x/sys/unix"
)

// ReadSystemMemory returns the percent of memory in use for system_memory_usage,
// reading files under root ("/" on a live system, a fixture tree in tests).
//
// Inside a cgroup v2 with a memory limit (<root>/sys/fs/cgroup/memory.max other
// than "max") it is memory.current less inactive_file from memory.stat, as a
// share of the limit: page cache the kernel can drop does not count, just as
// MemAvailable leaves it out on the host. Since a limit may be larger than the
// machine, the host's own figure is read too and the larger of the two returned.
// Without a limit it is MemTotal − MemAvailable from <root>/proc/meminfo.
//
// A read or parse that fails is an error, never a zero that would read as an
// idle machine.
func ReadSystemMemory(root string) (usedPercent float64, err error) {
	r := NewMemoryReader(root)
	defer r.Close()
	return r.Read(time.Time{})
}

// MemoryReader reads what ReadSystemMemory does, once a cycle, at less
// cost: it keeps <root>/proc/meminfo open and reads it with one pread,
// where opening it anew took ten system calls (the open, two fcntl, an
// fstat, four reads, the network poller's add and delete, the close), and
// it looks for a cgroup memory.max found absent again only CgroupRecheck
// later. Not safe for concurrent use.
type MemoryReader struct {
	root string
	fd   int // -1 until opened, and after a read failed
	buf  []byte
	// noCgroupUntil is when memory.max is looked for again after it was
	// found absent.
	noCgroupUntil time.Time
}

// CgroupRecheck is how long a MemoryReader trusts that there is no cgroup
// memory.max: a process is seldom moved into a limited cgroup, and one
// that is weighs its limit this long later at most.
const CgroupRecheck = time.Minute

// meminfoMax bounds the buffer /proc/meminfo is read into (1.5 KB on
// Linux 6): a file that fills it is no meminfo.
const meminfoMax = 1 << 20

// NewMemoryReader reads under root; it opens nothing before its first Read.
func NewMemoryReader(root string) *MemoryReader {
	return &MemoryReader{root: root, fd: -1, buf: make([]byte, 4096)}
}

// Read is ReadSystemMemory at now, the time that decides whether an absent
// memory.max is looked for again (at the zero time, always).
func (r *MemoryReader) Read(now time.Time) (usedPercent float64, err error) {
	host, err := r.readMeminfo()
	if err != nil {
		return 0, err
	}
	if !r.noCgroupUntil.IsZero() && now.Before(r.noCgroupUntil) {
		return host, nil
	}
	cg, limited, absent, err := readCgroup(filepath.Join(r.root, "sys", "fs", "cgroup"))
	if err != nil {
		return 0, err
	}
	r.noCgroupUntil = time.Time{}
	if absent && !now.IsZero() {
		r.noCgroupUntil = now.Add(CgroupRecheck)
	}
	if limited && cg > host {
		return cg, nil
	}
	return host, nil
}

// Close closes the kept file; a later Read opens it again.
func (r *MemoryReader) Close() error {
	if r.fd < 0 {
		return nil
	}
	err := unix.Close(r.fd)
	r.fd = -1
	return err
}

func (r *MemoryReader) readMeminfo() (float64, error) {
	path := filepath.Join(r.root, "proc", "meminfo")
	if r.fd < 0 {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return 0, fmt.Errorf("read system memory: open %s: %w", path, err)
		}
		r.fd = fd
	}
	var n int
	for {
		var e syscall.Errno
		n, e = rawio.Pread(r.fd, r.buf, 0)
		if e == rawio.EINTR {
			continue
		}
		if e != 0 {
			// Opened anew at the next read: what broke this descriptor
			// may not break the next.
			r.Close()
			return 0, fmt.Errorf("read system memory: read %s: %w", path, e)
		}
		if n < len(r.buf) {
			break
		}
		if len(r.buf) >= meminfoMax {
			return 0, fmt.Errorf("read system memory: %s is over %d bytes", path, meminfoMax)
		}
		r.buf = make([]byte, 2*len(r.buf))
	}
	total, avail, err := parseMeminfo(r.buf[:n])
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return percent(total-avail, total), nil
}

// readCgroup reports the cgroup's memory use in percent of its limit,
// whether there is a limit at all, and whether memory.max is absent.
func readCgroup(dir string) (usedPercent float64, limited, absent bool, err error) {
	maxPath := filepath.Join(dir, "memory.max")
	b, err := os.ReadFile(maxPath)
	if errors.Is(err, fs.ErrNotExist) {
		// No cgroup v2 memory controller here: the host figure is all there is.
		return 0, false, true, nil
	}
	if err != nil {
		return 0, false, false, fmt.Errorf("read cgroup memory limit: %w", err)
	}
	limit, limited, err := parseCgroupMax(b)
	if err != nil {
		return 0, false, false, fmt.Errorf("parse %s: %w", maxPath, err)
	}
	if !limited {
		return 0, false, false, nil
	}
	curPath := filepath.Join(dir, "memory.current")
	b, err = os.ReadFile(curPath)
	if err != nil {
		return 0, false, false, fmt.Errorf("read cgroup memory use: %w", err)
	}
	current, err := parseUint(b)
	if err != nil {
		return 0, false, false, fmt.Errorf("parse %s: %w", curPath, err)
	}
	statPath := filepath.Join(dir, "memory.stat")
	b, err = os.ReadFile(statPath)
	if err != nil {
		return 0, false, false, fmt.Errorf("read cgroup memory stat: %w", err)
	}
	inactive, err := parseInactiveFile(b)
	if err != nil {
		return 0, false, false, fmt.Errorf("parse %s: %w", statPath, err)
	}
	used := current
	if inactive < used {
		used -= inactive
	} else {
		used = 0
	}
	return percent(used, limit), true, false, nil
}

func percent(used, total uint64) float64 {
	return float64(used) / float64(total) * 100
}

// parseMeminfo returns MemTotal and MemAvailable in bytes from the text of
// /proc/meminfo. It reads up to the later of the two lines (the third of
// fifty-odd on Linux) and allocates nothing on the way: it runs every
// cycle.
func parseMeminfo(b []byte) (total, available uint64, err error) {
	var haveTotal, haveAvail bool
	for line := 1; len(b) > 0 && !(haveTotal && haveAvail); line++ {
		l := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			l, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		l = bytes.TrimSuffix(l, []byte{'\r'})
		key, rest, ok := bytes.Cut(l, []byte{':'})
		if !ok {
			return 0, 0, fmt.Errorf("line %d: no colon in %q", line, l)
		}
		isTotal := string(key) == "MemTotal"
		if !isTotal && string(key) != "MemAvailable" {
			continue
		}
		num, unit := bytes.TrimSpace(rest), []byte(nil)
		if i := bytes.IndexAny(num, " \t"); i >= 0 {
			num, unit = num[:i], bytes.TrimSpace(num[i:])
		}
		if len(num) == 0 || (len(unit) > 0 && string(unit) != "kB") {
			return 0, 0, fmt.Errorf("line %d: want %s: N kB, have %q", line, key, l)
		}
		n, err := strconv.ParseUint(string(num), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("line %d: %s: %w", line, key, err)
		}
		if n > 1<<54 {
			return 0, 0, fmt.Errorf("line %d: %s %d kB is out of range", line, key, n)
		}
		if isTotal {
			total, haveTotal = n*1024, true
		} else {
			available, haveAvail = n*1024, true
		}
	}
	switch {
	case !haveTotal:
		return 0, 0, errors.New("no MemTotal line")
	case !haveAvail:
		return 0, 0, errors.New("no MemAvailable line (kernel older than 3.14?)")
	case total == 0:
		return 0, 0, errors.New("MemTotal is 0")
	case available > total:
		return 0, 0, fmt.Errorf("MemAvailable %d kB exceeds MemTotal %d kB", available/1024, total/1024)
	}
	return total, available, nil
}

// parseCgroupMax reads memory.max: "max" when there is no limit, else bytes.
func parseCgroupMax(b []byte) (limit uint64, limited bool, err error) {
	if strings.TrimSpace(string(b)) == "max" {
		return 0, false, nil
	}
	n, err := parseUint(b)
	if err != nil {
		return 0, false, err
	}
	if n == 0 {
		return 0, false, errors.New("memory limit is 0")
	}
	return n, true, nil
}

// parseInactiveFile returns inactive_file from memory.stat, in bytes.
func parseInactiveFile(b []byte) (uint64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		key, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || key != "inactive_file" {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(val), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("line %d: inactive_file: %w", line, err)
		}
		return n, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no inactive_file line")
}

func parseUint(b []byte) (uint64, error) {
	s := strings.TrimSpace(string(b))
	if s == "" {
		return 0, errors.New("empty file")
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("want a byte count, have %q", s)
	}
	return n, nil
}
