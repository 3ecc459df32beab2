package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
)

// table prints, for each N, rate and design, the median over the
// repetitions of every figure, with the range of the CPU figure.
func table(w io.Writer, all []runResult) {
	type key struct {
		n, rate int
		design  string
	}
	groups := map[key][]runResult{}
	var keys []key
	order := map[string]int{}
	for _, r := range all {
		k := key{r.n, r.rate, r.design}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		if _, ok := order[r.design]; !ok {
			order[r.design] = len(order)
		}
		groups[k] = append(groups[k], r)
	}
	sort.SliceStable(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.n != b.n {
			return a.n < b.n
		}
		if a.rate != b.rate {
			return a.rate < b.rate
		}
		return order[a.design] < order[b.design]
	})
	fmt.Fprintln(w, "| N | datagrams/s | design | CPU µs per datagram, all receivers (min–max) | of it the reader | voluntary cs per datagram | involuntary cs per datagram | wake-ups per datagram | empty wake-ups per datagram | lost of sent | max ÷ min child share | ACK/BYE away from INVITE's child | sender µs per datagram |")
	fmt.Fprintln(w, "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, k := range keys {
		rs := groups[k]
		cpu := col(rs, runResult.cpuUS)
		lost, sentN := 0, 0
		var drops uint64
		for _, r := range rs {
			lost += r.lost
			sentN += r.snd.sent
			drops += r.drops
		}
		lostS := fmt.Sprintf("%d of %d", lost, sentN)
		if drops > 0 {
			lostS += fmt.Sprintf(" (%d at the hop)", drops)
		}
		reader := "—"
		if k.design == designA {
			reader = f1(median(col(rs, runResult.readerUS)))
		}
		fmt.Fprintf(w, "| %d | %d | %s | %s (%s–%s) | %s | %.2f | %.2f | %.2f | %.2f | %s | %s | %.0f %% | %s |\n",
			k.n, k.rate, k.design,
			f1(median(cpu)), f1(slicesMinF(cpu)), f1(slicesMaxF(cpu)), reader,
			median(col(rs, runResult.vcs)), median(col(rs, runResult.ivcs)),
			median(col(rs, runResult.wakes)), median(col(rs, runResult.empty)),
			lostS, ratio(median(col(rs, runResult.fairness))), median(col(rs, runResult.passedPct)),
			f1(median(col(rs, func(r runResult) float64 { return r.snd.cpuUS / float64(max(r.snd.sent, 1)) }))))
	}
}

func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func ratio(v float64) string {
	if math.IsInf(v, 1) {
		return "∞ (a child got none)"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func col(rs []runResult, f func(runResult) float64) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	return out
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return math.NaN()
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func slicesMinF(v []float64) float64 {
	m := math.Inf(1)
	for _, x := range v {
		m = math.Min(m, x)
	}
	return m
}

func slicesMaxF(v []float64) float64 {
	m := math.Inf(-1)
	for _, x := range v {
		m = math.Max(m, x)
	}
	return m
}

// writeCSV writes one row per run, every receiver's own figures included.
func writeCSV(path string, all []runResult) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"design", "n", "rate", "rep", "sent", "sent_per_s", "recv", "lost", "dups", "bad", "hop_drops",
		"cpu_us_per_dgram", "reader_us_per_dgram", "vcs_per_dgram", "ivcs_per_dgram", "wakes_per_dgram", "empty_per_dgram",
		"fairness", "passed_on_pct", "sender_us_per_dgram", "child_recv", "child_cpu_us"})
	g := func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
	for _, r := range all {
		var recv, cpu []string
		for _, c := range r.children {
			recv = append(recv, strconv.FormatUint(c.Recv, 10))
			cpu = append(cpu, g(c.UserUS+c.SysUS))
		}
		_ = w.Write([]string{r.design, strconv.Itoa(r.n), strconv.Itoa(r.rate), strconv.Itoa(r.rep),
			strconv.Itoa(r.snd.sent), g(float64(r.snd.sent) / r.snd.elapsed.Seconds()), strconv.FormatUint(r.recv(), 10),
			strconv.Itoa(r.lost), strconv.FormatUint(r.dups, 10), strconv.FormatUint(r.bad, 10), strconv.FormatUint(r.drops, 10),
			g(r.cpuUS()), g(r.readerUS()), g(r.vcs()), g(r.ivcs()), g(r.wakes()), g(r.empty()),
			g(r.fairness()), g(r.passedPct()), g(r.snd.cpuUS / float64(max(r.snd.sent, 1))),
			strings.Join(recv, "/"), strings.Join(cpu, "/")})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
