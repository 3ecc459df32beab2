package main

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// sample is one row of bench/soak.sh's samples CSV: one process (or, with
// Role "tree", the server's whole process tree) at one instant. A value the
// CSV gives as NA is NaN.
type sample struct {
	T      float64 // seconds since the UAC started
	Server string
	Role   string
	Pid    int
	RSSKB  float64
	PSSKB  float64
	CPUS   float64
	Heap   float64 // bytes
	GCCPUS float64
}

// columns are the ones soakplot reads; the CSV may have more.
var columns = []string{"t_s", "server", "role", "pid", "rss_kb", "pss_kb", "cpu_s", "heap_bytes", "gc_cpu_s"}

// readCSV reads the samples CSV. name is used in errors, which name the
// line of the file at fault.
func readCSV(r io.Reader, name string) ([]sample, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1 // checked below, to say which line is at fault
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: empty, want a header line (%s)", name, joinCols())
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	col := map[string]int{}
	for i, h := range header {
		col[h] = i
	}
	for _, c := range columns {
		if _, ok := col[c]; !ok {
			return nil, fmt.Errorf("%s line 1: header has no column %q (want %s)", name, c, joinCols())
		}
	}
	var out []sample
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		line, _ := cr.FieldPos(0)
		if len(rec) != len(header) {
			return nil, fmt.Errorf("%s line %d: %d fields, the header has %d", name, line, len(rec), len(header))
		}
		var s sample
		s.Server, s.Role = rec[col["server"]], rec[col["role"]]
		if s.Server == "" || s.Role == "" {
			return nil, fmt.Errorf("%s line %d: empty server or role", name, line)
		}
		pid, err := strconv.Atoi(rec[col["pid"]])
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("%s line %d: column pid: %q is not a process id", name, line, rec[col["pid"]])
		}
		s.Pid = pid
		for _, f := range []struct {
			col string
			dst *float64
		}{
			{"t_s", &s.T}, {"rss_kb", &s.RSSKB}, {"pss_kb", &s.PSSKB}, {"cpu_s", &s.CPUS},
			{"heap_bytes", &s.Heap}, {"gc_cpu_s", &s.GCCPUS},
		} {
			v, err := parseNum(rec[col[f.col]])
			if err != nil {
				return nil, fmt.Errorf("%s line %d: column %s: %w", name, line, f.col, err)
			}
			*f.dst = v
		}
		if math.IsNaN(s.T) || s.T < 0 {
			return nil, fmt.Errorf("%s line %d: column t_s: want seconds >= 0, have %q", name, line, rec[col["t_s"]])
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: a header and no samples", name)
	}
	return out, nil
}

// parseNum reads a number, or NA as NaN.
func parseNum(s string) (float64, error) {
	if s == "NA" {
		return math.NaN(), nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is not a number or NA", s)
	}
	return v, nil
}

func joinCols() string { return strings.Join(columns, ",") }
