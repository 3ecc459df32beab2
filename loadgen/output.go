package loadgen

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// csvColumns are the fixed columns; --scrape adds load_pct_<group> and
// workers_<group> for each group the first scrape found.
var csvColumns = []string{
	"elapsed_s", "target_cps", "offered", "succeeded", "failed",
	"failed_timeout", "failed_4xx", "failed_5xx", "failed_503_retry_after", "failed_other",
	"retransmissions", "retrans_received", "limited", "unexpected", "send_errors", "active",
	"setup_p50_ms", "setup_p90_ms", "setup_p99_ms",
	"offered_total", "succeeded_total", "failed_total",
	"gen_lag_ms", "gen_cpu_pct", "rcvbuf_drops", "oc_shed", "oc_feedback", "oc_loss_pct", "failed_by_reason",
}

// failureList writes failures by name, most first: "404 Not Found=3;timeout=1".
func failureList(m map[string]int64, kv, sep string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(k)
		b.WriteString(kv)
		b.WriteString(strconv.FormatInt(m[k], 10))
	}
	return b.String()
}

type csvWriter struct {
	w      *bufio.Writer
	header bool
	b      []byte
}

func newCSVWriter(w io.Writer) *csvWriter { return &csvWriter{w: bufio.NewWriter(w)} }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// cell quotes a group name only when CSV needs it.
func cell(s string) string {
	if strings.ContainsAny(s, ",\"\n") {
		return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
	}
	return s
}

func (c *csvWriter) write(r Row) {
	if !c.header {
		c.header = true
		h := strings.Join(csvColumns, ",")
		for _, g := range r.Groups {
			h += "," + cell("load_pct_"+g.Group) + "," + cell("workers_"+g.Group)
		}
		c.w.WriteString(h + "\n")
	}
	b := c.b[:0]
	f := func(v float64, prec int) {
		b = strconv.AppendFloat(b, v, 'f', prec, 64)
		b = append(b, ',')
	}
	i := func(v int64) {
		b = strconv.AppendInt(b, v, 10)
		b = append(b, ',')
	}
	f(r.Elapsed.Seconds(), 3)
	f(r.TargetCPS, 2)
	for _, v := range []int64{r.Offered, r.Succeeded, r.Failed, r.FailedTimeout, r.Failed4xx, r.Failed5xx,
		r.Failed503RetryAfter, r.FailedOther, r.Retransmissions, r.RetransReceived, r.Limited, r.Unexpected,
		r.SendErrors, r.Active} {
		i(v)
	}
	f(ms(r.SetupP50), 3)
	f(ms(r.SetupP90), 3)
	f(ms(r.SetupP99), 3)
	i(r.Total.Offered)
	i(r.Total.Succeeded)
	i(r.Total.Failed)
	f(ms(r.GenLag), 3)
	f(r.GenCPU, 1)
	i(r.RcvbufDrops)
	i(r.Shed)
	i(r.OCFeedback)
	i(int64(r.OCLoss))
	if len(r.Failures) > 0 {
		b = append(b, cell(failureList(r.Failures, "=", ";"))...)
	}
	b = append(b, ',')
	for _, g := range r.Groups {
		if math.IsNaN(g.Load) {
			b = append(b, ',')
		} else {
			f(100*g.Load, 1)
		}
		if math.IsNaN(g.Workers) {
			b = append(b, ',')
		} else {
			f(g.Workers, 0)
		}
	}
	b[len(b)-1] = '\n'
	c.w.Write(b)
	c.b = b
	// A row per second is cheap to flush, and a run cut short keeps its data.
	c.w.Flush()
}

func (c *csvWriter) close() error { return c.w.Flush() }

// status is the live one-line view; silent unless w is a terminal.
type status struct {
	w    io.Writer
	on   bool
	wide int
}

func newStatus(w io.Writer, quiet bool) *status {
	s := &status{w: w}
	if f, ok := w.(*os.File); ok && !quiet {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			s.on = true
		}
	}
	return s
}

func (s *status) row(r Row) {
	if !s.on {
		return
	}
	line := fmt.Sprintf("%6.1fs  target %6.1f/s  offered %5d/s  ok %5d/s  failed %d  active %d  p99 %.1fms  total %d/%d/%d",
		r.Elapsed.Seconds(), r.TargetCPS, r.Offered, r.Succeeded, r.Failed, r.Active, ms(r.SetupP99),
		r.Total.Offered, r.Total.Succeeded, r.Total.Failed)
	if r.GenLag > lagWarn {
		line += fmt.Sprintf("  GENERATOR BEHIND %v", r.GenLag.Round(time.Millisecond))
	}
	pad := ""
	if n := s.wide - len(line); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	s.wide = len(line)
	fmt.Fprintf(s.w, "\r%s%s", line, pad)
}

func (s *status) end() {
	if s.on && s.wide > 0 {
		fmt.Fprintln(s.w)
	}
}

func writeSummary(w io.Writer, o *Options, st Stats) {
	rate := 0.0
	if st.Elapsed > 0 {
		rate = float64(st.Succeeded) / st.Elapsed.Seconds()
	}
	fmt.Fprintf(w, "sipload %s: %.1fs\n", o.Scenario, st.Elapsed.Seconds())
	fmt.Fprintf(w, "  calls      offered %d  succeeded %d  failed %d  aborted %d  (%.1f succeeded/s)\n",
		st.Offered, st.Succeeded, st.Failed, st.Aborted, rate)
	fmt.Fprintf(w, "  failures   timeout %d  4xx %d  5xx %d  503+Retry-After %d  other %d\n",
		st.FailedTimeout, st.Failed4xx, st.Failed5xx, st.Failed503RetryAfter, st.FailedOther)
	if len(st.Failures) > 0 {
		fmt.Fprintf(w, "  failed by  %s\n", failureList(st.Failures, " ", ", "))
	}
	fmt.Fprintf(w, "  messages   retransmitted %d  duplicates received %d  unexpected %d  send errors %d  limited by -l %d\n",
		st.Retransmissions, st.RetransReceived, st.Unexpected, st.SendErrors, st.Limited)
	if o.Handshakes {
		fmt.Fprintf(w, "  handshakes full %d  resumed %d\n", st.Succeeded-st.Resumed, st.Resumed)
	}
	if o.OC {
		fmt.Fprintf(w, "  overload   RFC 7339 feedback in %d responses, last loss %d%%, max %d%%  calls shed %d\n",
			st.OCFeedback, st.OCLastLoss, st.OCMaxLoss, st.Shed)
	}
	if o.AuthPass != "" {
		fmt.Fprintf(w, "  auth       challenged %d (answered with -au/-ap credentials)\n", st.Challenged)
	}
	if o.Scenario != "uas" {
		fmt.Fprintf(w, "  setup      p50 %.2fms  p90 %.2fms  p99 %.2fms\n", ms(st.SetupP50), ms(st.SetupP90), ms(st.SetupP99))
	}
	fmt.Fprintf(w, "  generator  max lag %v  max CPU %.0f%%  socket drops %d\n", st.MaxLag.Round(time.Microsecond), st.MaxCPU, st.Drops)
	for _, m := range st.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", m)
	}
}
