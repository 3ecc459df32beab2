package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const header = "t_s,server,role,pid,rss_kb,pss_kb,cpu_s,heap_bytes,gc_cpu_s,calls,successful,failed,server_refused,suspended\n"

// good is what soak.sh writes: process rows and a tree row per sample, NA
// where a value does not apply.
const good = header +
	"0.0,sipvisor,supervisor,100,20480,15000,0.10,2097152,NA,NA,NA,NA,NA,NA\n" +
	"0.0,sipvisor,udp-1,101,30720,25000,0.20,4194304,0.010,NA,NA,NA,NA,NA\n" +
	"0.0,sipvisor,tree,100,NA,40000,0.30,NA,NA,NA,NA,NA,0,0\n" +
	"5.0,sipvisor,supervisor,100,20500,15010,0.50,2100000,NA,NA,NA,NA,NA,NA\n" +
	"5.0,sipvisor,udp-1,101,31000,25100,1.20,4200000,0.060,NA,NA,NA,NA,NA\n" +
	"5.0,sipvisor,tree,100,NA,40110,1.70,NA,NA,1500,1490,0,0,0\n" +
	"0.0,kamailio,main,200,12000,8000,0.01,NA,NA,NA,NA,NA,NA,NA\n" +
	"0.0,kamailio,tree,200,NA,12000,0.05,NA,NA,NA,NA,NA,NA,NA\n" +
	"5.0,kamailio,main,200,12100,8100,0.02,NA,NA,NA,NA,NA,NA,NA\n" +
	"5.0,kamailio,tree,200,NA,12500,1.05,NA,NA,1500,1500,0,NA,NA\n"

func TestReadCSV(t *testing.T) {
	t.Parallel()
	rows, err := readCSV(strings.NewReader(good), "s.csv")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 10 {
		t.Fatalf("%d rows, want 10", len(rows))
	}
	w := rows[4]
	if w.T != 5 || w.Server != "sipvisor" || w.Role != "udp-1" || w.Pid != 101 ||
		w.RSSKB != 31000 || w.PSSKB != 25100 || w.CPUS != 1.2 || w.Heap != 4200000 || w.GCCPUS != 0.06 {
		t.Errorf("row 5 = %+v", w)
	}
	tree := rows[2]
	if !math.IsNaN(tree.RSSKB) || tree.PSSKB != 40000 || !math.IsNaN(tree.Heap) {
		t.Errorf("tree row: NA should read as NaN: %+v", tree)
	}
}

// Columns are found by name: another order, or one more column, reads the
// same.
func TestReadCSVColumnsByName(t *testing.T) {
	t.Parallel()
	in := "role,server,extra,pid,t_s,rss_kb,pss_kb,cpu_s,heap_bytes,gc_cpu_s\n" +
		"udp-2,sipvisor,x,7,12.5,100,90,1,NA,NA\n"
	rows, err := readCSV(strings.NewReader(in), "s.csv")
	if err != nil {
		t.Fatal(err)
	}
	if r := rows[0]; r.Role != "udp-2" || r.Pid != 7 || r.T != 12.5 || r.RSSKB != 100 {
		t.Errorf("got %+v", r)
	}
}

func TestReadCSVRefusesMalformed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, in, want string
	}{
		{"empty", "", "s.csv: empty, want a header line"},
		{"no samples", header, "s.csv: a header and no samples"},
		{"missing column", "t_s,server,role,pid,rss_kb,pss_kb,cpu_s,heap_bytes\n", `s.csv line 1: header has no column "gc_cpu_s"`},
		{"short row", good + "10.0,sipvisor,udp-1,101,31000\n", "s.csv line 12: 5 fields, the header has 14"},
		{"not a number", header + "0.0,sipvisor,udp-1,101,lots,25000,0.20,NA,NA,NA,NA,NA,NA,NA\n", `s.csv line 2: column rss_kb: "lots" is not a number or NA`},
		{"empty value", header + "0.0,sipvisor,udp-1,101,,25000,0.20,NA,NA,NA,NA,NA,NA,NA\n", `s.csv line 2: column rss_kb: "" is not a number or NA`},
		{"bad pid", header + "0.0,sipvisor,udp-1,NA,1,1,1,NA,NA,NA,NA,NA,NA,NA\n", `s.csv line 2: column pid: "NA" is not a process id`},
		{"time NA", header + "NA,sipvisor,udp-1,3,1,1,1,NA,NA,NA,NA,NA,NA,NA\n", `s.csv line 2: column t_s: want seconds >= 0, have "NA"`},
		{"no role", header + "1,sipvisor,,3,1,1,1,NA,NA,NA,NA,NA,NA,NA\n", "s.csv line 2: empty server or role"},
		{"bad quoting", header + "1,\"sipvisor,udp-1,3,1,1,1,NA,NA,NA,NA,NA,NA,NA\n", "s.csv: parse error on line 2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := readCSV(strings.NewReader(c.in), "s.csv")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

func TestPanelsOnlyWithData(t *testing.T) {
	t.Parallel()
	rows, err := readCSV(strings.NewReader(good), "s.csv")
	if err != nil {
		t.Fatal(err)
	}
	titles := func(ps []panel) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.title)
		}
		return out
	}
	ps := panels(rows)
	want := []string{"sipvisor: RSS per process", "whole process tree: sum of PSS", "sipvisor: Go heap in use", "sipvisor: GC CPU per worker"}
	if got := titles(ps); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("panels %q, want %q", got, want)
	}
	// GC CPU: (0.060 - 0.010) s over 5 s is 1 % of a core.
	if g := ps[3].lines[0]; g.name != "udp-1" || len(g.pts) != 1 || math.Abs(g.pts[0].Y-1) > 1e-9 {
		t.Errorf("GC line %+v", g)
	}
	if tree := ps[1].lines; len(tree) != 2 || tree[0].name != "sipvisor" || tree[1].name != "kamailio" {
		t.Errorf("tree lines %+v", tree)
	}

	// Kamailio alone: no sipvisor panels.
	var kam []sample
	for _, r := range rows {
		if r.Server == "kamailio" {
			kam = append(kam, r)
		}
	}
	if got := titles(panels(kam)); len(got) != 1 || got[0] != "whole process tree: sum of PSS" {
		t.Errorf("kamailio only: panels %q", got)
	}

	// Workers without heap or GC figures: the heap panel says so, no GC panel.
	var noWorkerHeap []sample
	for _, r := range rows {
		if r.Role == "udp-1" {
			r.Heap, r.GCCPUS = math.NaN(), math.NaN()
		}
		noWorkerHeap = append(noWorkerHeap, r)
	}
	got := titles(panels(noWorkerHeap))
	if len(got) != 3 || got[2] != "sipvisor: Go heap in use (the workers' is not reported)" {
		t.Errorf("no worker heap: panels %q", got)
	}
}

func TestRoleOrder(t *testing.T) {
	t.Parallel()
	in := []string{"udp-10", "timer-1", "udp-2", "supervisor", "udp-1"}
	want := "supervisor timer-1 udp-1 udp-2 udp-10"
	var rows []sample
	for i, r := range in {
		rows = append(rows, sample{Server: "sipvisor", Role: r, Pid: i + 1, RSSKB: 1})
	}
	var got []string
	for _, l := range series(rows, func(sample) bool { return true }, func(s sample) float64 { return s.RSSKB }) {
		got = append(got, l.name)
	}
	if strings.Join(got, " ") != want {
		t.Errorf("order %q, want %q", got, want)
	}
}

func TestRunWritesPNG(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in := filepath.Join(dir, "s.csv")
	if err := os.WriteFile(in, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "s.png")
	var stderr bytes.Buffer
	if err := run([]string{"-in", in, "-out", out}, &stderr); err != nil {
		t.Fatal(err, stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Errorf("%s is not a PNG", out)
	}
	if err := run([]string{"-in", in, "-out", filepath.Join(dir, "s.gif")}, &stderr); err == nil ||
		!strings.Contains(err.Error(), "want a .svg or .png") {
		t.Errorf("gif: error %v", err)
	}
	if err := run([]string{"-in", in}, &stderr); err == nil {
		t.Error("no -out: no error")
	}
}

// Tick labels carry no binary-fraction noise.
func TestTickLabel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v    float64
		want string
	}{{1.2000000000000002, "1.2"}, {0.4, "0.4"}, {25, "25"}, {600, "600"}, {0.30000000000000004, "0.3"}, {12345, "12345"}} {
		if got := tickLabel(tc.v); got != tc.want {
			t.Errorf("tickLabel(%v): want %q, have %q", tc.v, tc.want, got)
		}
	}
}
