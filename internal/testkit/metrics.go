package testkit

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// Scrape is the body of a GET of url, a /metrics page; a request that fails
// or answers other than 200 fails the test.
func Scrape(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s: %s", url, resp.Status, b)
	}
	return string(b)
}

// Metric reads the series name from body, a Prometheus text exposition: the
// sum of the samples of every series of that name whose labels include all
// of labels, each written as in PromQL, `key="value"` (none: every series of
// the name). It fails the test when no series matches, so that a renamed
// metric or label cannot read as 0; see MetricOrZero.
func Metric(t testing.TB, body, name string, labels ...string) float64 {
	t.Helper()
	v, ok, err := LookupMetric(body, name, labels...)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatalf("metric %s%s: no such series in:\n%s", name, matchers(labels), seriesOf(body, name))
	}
	return v
}

// MetricOrZero is Metric that reads a missing series as 0: for a series of
// a vector that appears only once counted, such as a counter of drops
// where none happened.
func MetricOrZero(t testing.TB, body, name string, labels ...string) float64 {
	t.Helper()
	v, _, err := LookupMetric(body, name, labels...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// LookupMetric is Metric without a test: ok says whether any series
// matched; err is a malformed matcher or exposition line.
func LookupMetric(body, name string, labels ...string) (v float64, ok bool, err error) {
	want := make(map[string]string, len(labels))
	for _, l := range labels {
		k, val, found := strings.Cut(l, "=")
		uq, qerr := strconv.Unquote(val)
		if !found || k == "" || qerr != nil || !strings.HasPrefix(val, `"`) {
			return 0, false, fmt.Errorf("label matcher %q: want key=\"value\"", l)
		}
		want[k] = uq
	}
	for line := range strings.Lines(body) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		s, perr := parseSample(line)
		if perr != nil {
			return 0, false, perr
		}
		if s.name != name {
			continue
		}
		match := true
		for k, val := range want {
			if have, ok := s.labels[k]; !ok || have != val {
				match = false
				break
			}
		}
		if match {
			v += s.value
			ok = true
		}
	}
	return v, ok, nil
}

type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// parseSample reads one line of the text exposition format:
// name{key="value",...} value [timestamp].
func parseSample(line string) (sample, error) {
	var s sample
	i := strings.IndexAny(line, "{ \t")
	if i <= 0 {
		return s, fmt.Errorf("metrics line %q: no name and value", line)
	}
	s.name = line[:i]
	rest := line[i:]
	if rest[0] == '{' {
		s.labels = map[string]string{}
		rest = rest[1:]
		for {
			rest = strings.TrimLeft(rest, " ,")
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.IndexByte(rest, '=')
			if eq <= 0 || len(rest) < eq+2 || rest[eq+1] != '"' {
				return s, fmt.Errorf("metrics line %q: bad label", line)
			}
			key := strings.TrimSpace(rest[:eq])
			val, n, ok := unescapeLabel(rest[eq+2:])
			if !ok {
				return s, fmt.Errorf("metrics line %q: unterminated label value", line)
			}
			s.labels[key] = val
			rest = rest[eq+2+n:]
		}
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return s, fmt.Errorf("metrics line %q: no value", line)
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return s, fmt.Errorf("metrics line %q: value: %v", line, err)
	}
	s.value = v
	return s, nil
}

// unescapeLabel reads a label value up to its closing quote, undoing the
// format's three escapes; n is how much of s it took, the quote included.
func unescapeLabel(s string) (v string, n int, ok bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			return b.String(), i + 1, true
		case '\\':
			if i+1 == len(s) {
				return "", 0, false
			}
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			default:
				b.WriteByte(s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", 0, false
}

func matchers(labels []string) string {
	if len(labels) == 0 {
		return ""
	}
	return "{" + strings.Join(labels, ",") + "}"
}

// seriesOf is the lines of body about name, or a note that there are none,
// for a failure message that shows what was there instead.
func seriesOf(body, name string) string {
	var b strings.Builder
	for line := range strings.Lines(body) {
		if strings.HasPrefix(line, name) {
			b.WriteString(line)
		}
	}
	if b.Len() == 0 {
		return "(no series named " + name + ")"
	}
	return b.String()
}
