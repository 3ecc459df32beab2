package ctl

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

// writePS prints the groups, then their workers, each as an aligned table.
func writePS(w io.Writer, gs []Group) error {
	if len(gs) == 0 {
		_, err := fmt.Fprintln(w, "no worker groups")
		return err
	}
	t := table(w)
	fmt.Fprintln(t, "GROUP\tKIND\tPROFILE\tWORKERS\tLOAD 1s/1m/10m")
	gs = slices.Clone(gs)
	for i, g := range gs {
		// Two generations overlap after an upgrade: each group says whose.
		if g.Generation != 0 {
			gs[i].Name = fmt.Sprintf("gen%d/%s", g.Generation, g.Name)
		}
	}
	for _, g := range gs {
		fmt.Fprintf(t, "%s\t%s\t%s\t%d\t%s\n", g.Name, g.Kind, orDash(g.Profile), len(g.Workers), fmtLoads(g.Load))
	}
	if err := t.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	t = table(w)
	fmt.Fprintln(t, "GROUP\tID\tPID\tSTATE\tLOAD 1s/1m/10m\tQUEUE\tWAIT\tSESSIONS\tHEAP\tGC CPU\tGC %\tAGE")
	for _, g := range gs {
		for _, wk := range g.Workers {
			// A worker that has not reported its heap has not reported its
			// GC time either: both are unknown, not 0.
			gc, share := "-", "-"
			if wk.HeapBytes > 0 {
				gc = fmtValue(wk.GCCPUSeconds, "s")
			}
			if wk.GCCPUPercent != nil {
				share = strconv.FormatFloat(*wk.GCCPUPercent, 'f', 1, 64)
			}
			fmt.Fprintf(t, "%s\t%d\t%d\t%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\n",
				g.Name, wk.ID, wk.Pid, wk.State, fmtLoads(wk.Load), wk.Queue, fmtWait(wk.QueueWaitSeconds),
				wk.Sessions, fmtBytes(wk.HeapBytes), gc, share, fmtAge(wk.Age))
		}
	}
	return t.Flush()
}

// writeSockets prints the addresses served, one a line.
func writeSockets(w io.Writer, ss []Socket) error {
	t := table(w)
	fmt.Fprintln(t, "PROTO\tADDRESS")
	for _, s := range ss {
		fmt.Fprintf(t, "%s\t%s\n", s.Proto, s.Address)
	}
	return t.Flush()
}

// fmtWait is a queue's wait, in milliseconds up to a second.
func fmtWait(secs float64) string {
	if secs < 1 {
		return strconv.FormatFloat(secs*1000, 'f', 0, 64) + "ms"
	}
	return strconv.FormatFloat(secs, 'f', 1, 64) + "s"
}

// fmtBytes is a size in binary units, as worker_memory_limit is written;
// 0 is unknown ("-").
func fmtBytes(b uint64) string {
	switch {
	case b == 0:
		return "-"
	case b < 1<<10:
		return fmt.Sprintf("%dB", b)
	case b < 1<<20:
		return fmt.Sprintf("%.1fKiB", float64(b)/(1<<10))
	case b < 1<<30:
		return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%.1fGiB", float64(b)/(1<<30))
}

func fmtLoads(l Loads) string {
	return fmt.Sprintf("%.1f/%.1f/%.1f", l.Second, l.Minute, l.TenMinutes)
}

// fmtAge is a duration cut to its two largest units, which is all a glance
// at `ps` needs; a zero second unit is left out (30m, not 30m00s).
func fmtAge(d time.Duration) string {
	s := int64(d / time.Second)
	two := func(big int64, bigU string, small int64, smallU string) string {
		if small == 0 {
			return fmt.Sprintf("%d%s", big, bigU)
		}
		return fmt.Sprintf("%d%s%02d%s", big, bigU, small, smallU)
	}
	switch {
	case s < 0:
		return "-"
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return two(s/60, "m", s%60, "s")
	case s < 86400:
		return two(s/3600, "h", s%3600/60, "m")
	}
	return two(s/86400, "d", s%86400/3600, "h")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writeState is the one-line answer to suspend and resume.
func writeState(w io.Writer, s Stats) error {
	if !s.Suspended {
		_, err := fmt.Fprintln(w, "running: accepting new sessions")
		return err
	}
	msg := "suspended: not accepting new sessions"
	if s.Warning != "" {
		msg += "\n" + s.Warning
	}
	_, err := fmt.Fprintln(w, msg)
	return err
}

func writeStats(w io.Writer, s Stats) error {
	t := table(w)
	if s.Suspended {
		fmt.Fprintln(t, "state:\tsuspended, not accepting new sessions")
		if s.Warning != "" {
			fmt.Fprintf(t, "warning:\t%s\n", s.Warning)
		}
		for _, r := range s.SuspendReasons {
			fmt.Fprintf(t, "reason:\t%s\n", r)
		}
		fmt.Fprintf(t, "suspended for:\t%s\n", fmtAge(seconds(s.SuspendedSeconds)))
	} else {
		fmt.Fprintln(t, "state:\trunning, accepting new sessions")
	}
	if s.Healthy {
		fmt.Fprintln(t, "health:\thealthy")
	} else {
		fmt.Fprintf(t, "health:\tunhealthy: %s\n", orDash(s.HealthReason))
	}
	fmt.Fprintf(t, "uptime:\t%s\n", fmtAge(seconds(s.UptimeSeconds)))
	if err := t.Flush(); err != nil {
		return err
	}
	if len(s.Throttle) > 0 {
		fmt.Fprintln(w, "\nthrottle:")
		t = table(w)
		fmt.Fprintln(t, "  GROUP\tREFUSED\tRTT\tTHRESHOLD")
		for _, th := range s.Throttle {
			refused := "off (disabled)"
			if th.Enabled {
				refused = fmtValue(th.SharePercent, "%")
			}
			fmt.Fprintf(t, "  %s\t%s\t%s\t%s\n", th.Group, refused, fmtValue(th.RTTSeconds, "s"), fmtValue(th.ThresholdSeconds, "s"))
		}
		if err := t.Flush(); err != nil {
			return err
		}
	}
	if len(s.Flips) > 0 || s.FlipThreshold > 0 {
		fmt.Fprintf(w, "\nflips (within %s; unhealthy at %d):\n", fmtAge(seconds(s.FlipWindowSeconds)), s.FlipThreshold)
		t = table(w)
		for _, k := range sortedKeys(s.Flips) {
			fmt.Fprintf(t, "  %s\t%d\n", k, s.Flips[k])
		}
		if err := t.Flush(); err != nil {
			return err
		}
	}
	if len(s.Counters) > 0 {
		fmt.Fprintln(w, "\ncounters:")
		t = table(w)
		for _, k := range sortedKeys(s.Counters) {
			fmt.Fprintf(t, "  %s\t%s\n", k, fmtNum(s.Counters[k]))
		}
		return t.Flush()
	}
	return nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// writeGet prints one "path = value" line per setting, so that the output
// of a subtree can be grepped and each line pasted into `ctl set`.
func writeGet(w io.Writer, path string, v any) error {
	var lines []string
	var walk func(p string, v any)
	walk = func(p string, v any) {
		m, ok := v.(map[string]any)
		if !ok {
			lines = append(lines, p+" = "+fmtAny(v))
			return
		}
		for _, k := range sortedKeys(m) {
			q := k
			if p != "" {
				q = p + "/" + k
			}
			walk(q, m[k])
		}
	}
	walk(path, v)
	if len(lines) == 0 {
		lines = append(lines, "no settings")
	}
	_, err := io.WriteString(w, strings.Join(lines, "\n")+"\n")
	return err
}

func fmtAny(v any) string {
	switch v := v.(type) {
	case float64:
		return fmtNum(v)
	case bool:
		return strconv.FormatBool(v)
	case nil:
		return "null"
	}
	return fmt.Sprint(v)
}

// writeResources prints the monitors and limits after Junos' `show system
// resource-monitor`: a summary, the legend, and a table with * beside each
// value over its threshold.
func writeResources(w io.Writer, rs []Resource) error {
	over := 0
	for _, r := range rs {
		if r.Over {
			over++
		}
	}
	fmt.Fprintf(w, "Resource Usage Summary\n\n")
	fmt.Fprintf(w, "%-32s: %d of %d\n\n", "Resources over threshold", over, len(rs))
	fmt.Fprintf(w, "* - Threshold exceeded\n\n")
	t := table(w)
	fmt.Fprintln(t, "Resource\tValue\t \tHigh\tLow")
	for _, r := range rs {
		mark := " "
		if r.Over {
			mark = "*"
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\n", r.Name, fmtValue(r.Value, r.Unit), mark,
			fmtThreshold(r.High, r.Unit), fmtThreshold(r.Low, r.Unit))
	}
	return t.Flush()
}

// fmtThreshold shows an unset threshold (0) as "-": a limit of 0 means
// unlimited, and only watermarks have a low one.
func fmtThreshold(v float64, unit string) string {
	if v == 0 {
		return "-"
	}
	return fmtValue(v, unit)
}

// fmtValue rounds to what an operator can use: a tenth of a percent, a
// millisecond, a hundredth of a count.
func fmtValue(v float64, unit string) string {
	switch unit {
	case "%":
		return fmtNum(math.Round(v*10)/10) + "%"
	case "s":
		return fmtNum(math.Round(v*1000)/1000) + "s"
	case "":
		return fmtNum(math.Round(v*100) / 100)
	}
	return fmtNum(v) + " " + unit
}

func writeBindings(w io.Writer, bs []Binding, now time.Time) error {
	if len(bs) == 0 {
		_, err := fmt.Fprintln(w, "no bindings")
		return err
	}
	t := table(w)
	fmt.Fprintln(t, "AOR\tCONTACT\tEXPIRES IN\tSOURCE")
	for _, b := range bs {
		in := b.Expires.Sub(now).Truncate(time.Second)
		left := "expired"
		if in > 0 {
			left = fmtAge(in)
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\n", b.AOR, b.Contact, left, orDash(b.Source))
	}
	return t.Flush()
}

// writeBans prints the bans in force.
func writeBans(w io.Writer, bs []Ban, now time.Time) error {
	if len(bs) == 0 {
		_, err := fmt.Fprintln(w, "no bans")
		return err
	}
	t := table(w)
	fmt.Fprintln(t, "SOURCE\tREASON\tUNTIL\tENDS IN\tCOUNT\tUSER")
	for _, b := range bs {
		left := "ended"
		if in := b.Until.Sub(now).Truncate(time.Second); in > 0 {
			left = fmtAge(in)
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%d\t%s\n", b.Source, b.Reason, b.Until.UTC().Format(time.RFC3339), left, b.Count, orDash(b.User))
	}
	return t.Flush()
}

// writeReload prints what a reload did: the settings that changed, and each
// change that takes a restart as FILE:LINE, the form an editor jumps to.
func writeReload(w io.Writer, r ReloadResult) error {
	b := &strings.Builder{}
	b.WriteString("reloaded\n")
	if len(r.Changed) > 0 {
		fmt.Fprintf(b, "changed: %s\n", strings.Join(r.Changed, ", "))
	}
	if len(r.RestartNeeded) > 0 {
		b.WriteString("not applied, these take a restart:\n")
		for _, l := range r.RestartNeeded {
			fmt.Fprintf(b, "  %s\n", l)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
