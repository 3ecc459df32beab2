package loadgen

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
)

// injection is one -inf CSV file: its first line names the order in which
// calls take its lines (SEQUENTIAL or RANDOM), each further line is one
// call's fields, separated by semicolons; lines starting with # are skipped.
type injection struct {
	path   string
	random bool
	lines  [][]string
	next   int
}

func loadInjection(path string) (*injection, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseInjection(path, b)
}

func parseInjection(path string, b []byte) (*injection, error) {
	in := &injection{path: path}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		l := strings.TrimRight(sc.Text(), "\r")
		if n == 1 {
			switch {
			case strings.Contains(l, "SEQUENTIAL"):
			case strings.Contains(l, "RANDOM"):
				in.random = true
			case strings.Contains(l, "USER"):
				return nil, fmt.Errorf("%s:1: USER order is not supported (SEQUENTIAL and RANDOM are)", path)
			default:
				return nil, fmt.Errorf("%s:1: want SEQUENTIAL or RANDOM on the first line, have %q", path, clip([]byte(l)))
			}
			continue
		}
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		in.lines = append(in.lines, strings.Split(l, ";"))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(in.lines) == 0 {
		return nil, fmt.Errorf("%s: no data lines after the first", path)
	}
	return in, nil
}

// pick is the line the next call uses.
func (in *injection) pick(rng *rand.Rand) int {
	if in.random {
		return rng.IntN(len(in.lines))
	}
	i := in.next
	in.next = (in.next + 1) % len(in.lines)
	return i
}

// field is [fieldN] of call cl, from the file the keyword names or the
// first -inf, on its line= or the call's line.
func (x *xrole) field(cl *call, s *segment) string {
	if len(x.inf) == 0 {
		return ""
	}
	in := x.inf[0]
	line := cl.x.infLine
	if s.name != "" {
		in = nil
		for _, f := range x.inf {
			if f.path == s.name || filepath.Base(f.path) == s.name {
				in = f
				if f != x.inf[0] {
					line = cl.x.infLine % len(f.lines)
				}
			}
		}
		if in == nil {
			return ""
		}
	}
	if s.line >= 0 {
		line = s.line % len(in.lines)
	}
	l := in.lines[line]
	if s.n < len(l) {
		return l[s.n]
	}
	return ""
}
