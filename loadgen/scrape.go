package loadgen

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The server metrics --scrape reads.
const (
	metricLoad    = "sipvisor_profile_load_ratio"
	metricWorkers = "sipvisor_pool_workers"
)

// sample is one line of the Prometheus text exposition format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// parseMetrics reads the Prometheus text format (version 0.0.4). Only the
// sample lines matter here; comments and blank lines are skipped. An error
// names the line.
func parseMetrics(text string) ([]sample, error) {
	var out []sample
	for i, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || l[0] == '#' {
			continue
		}
		s, err := parseSample(l)
		if err != nil {
			return out, fmt.Errorf("metrics line %d: %w", i+1, err)
		}
		out = append(out, s)
	}
	return out, nil
}

func parseSample(l string) (sample, error) {
	var s sample
	i := strings.IndexAny(l, "{ \t")
	if i <= 0 {
		return s, fmt.Errorf("no value in %q", clip([]byte(l)))
	}
	s.name = l[:i]
	rest := l[i:]
	if rest[0] == '{' {
		s.labels = map[string]string{}
		rest = rest[1:]
		for {
			rest = strings.TrimLeft(rest, " \t,")
			if rest == "" {
				return s, fmt.Errorf("unterminated labels in %q", clip([]byte(l)))
			}
			if rest[0] == '}' {
				rest = rest[1:]
				break
			}
			eq := strings.IndexByte(rest, '=')
			if eq <= 0 || eq+1 >= len(rest) || rest[eq+1] != '"' {
				return s, fmt.Errorf("bad label in %q", clip([]byte(l)))
			}
			name := strings.TrimSpace(rest[:eq])
			rest = rest[eq+2:]
			var v strings.Builder
			closed := false
			for j := 0; j < len(rest); j++ {
				c := rest[j]
				if c == '\\' && j+1 < len(rest) {
					j++
					switch rest[j] {
					case 'n':
						v.WriteByte('\n')
					default:
						v.WriteByte(rest[j])
					}
					continue
				}
				if c == '"' {
					rest = rest[j+1:]
					closed = true
					break
				}
				v.WriteByte(c)
			}
			if !closed {
				return s, fmt.Errorf("unterminated label value in %q", clip([]byte(l)))
			}
			s.labels[name] = v.String()
		}
	}
	f := strings.Fields(rest)
	if len(f) == 0 || len(f) > 2 {
		return s, fmt.Errorf("want one value after %s, have %q", s.name, rest)
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return s, fmt.Errorf("value %q of %s is not a number", f[0], s.name)
	}
	s.value = v
	return s, nil
}

// groupSamples picks each group's load and live worker count out of the
// samples. A worker in state exited no longer serves, so it is not counted.
func groupSamples(ss []sample) map[string]GroupSample {
	g := map[string]GroupSample{}
	get := func(name string) GroupSample {
		if v, ok := g[name]; ok {
			return v
		}
		return GroupSample{Group: name, Load: math.NaN(), Workers: math.NaN()}
	}
	for _, s := range ss {
		name, ok := s.labels["group"]
		if !ok {
			continue
		}
		switch s.name {
		case metricLoad:
			v := get(name)
			v.Load = s.value
			g[name] = v
		case metricWorkers:
			v := get(name)
			if math.IsNaN(v.Workers) {
				v.Workers = 0
			}
			if !strings.EqualFold(s.labels["state"], "exited") {
				v.Workers += s.value
			}
			g[name] = v
		}
	}
	return g
}

// scraper reads the server's metrics once a second in its own goroutine, so a
// slow server endpoint never stalls the call loop.
type scraper struct {
	url    string
	client *http.Client
	mu     sync.Mutex
	groups []string // fixed at the first successful read, for stable columns
	last   map[string]GroupSample
	errs   int
	ready  chan struct{}
	once   sync.Once
}

func newScraper(url string) *scraper {
	return &scraper{url: url, client: &http.Client{Timeout: 900 * time.Millisecond}, ready: make(chan struct{})}
}

func (s *scraper) scrapeOnce(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("scrape %s: %s", s.url, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	ss, err := parseMetrics(string(b))
	if err != nil {
		return err
	}
	g := groupSamples(ss)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.groups == nil {
		s.groups = []string{}
		for name := range g {
			s.groups = append(s.groups, name)
		}
		sort.Strings(s.groups)
	}
	s.last = g
	s.once.Do(func() { close(s.ready) })
	return nil
}

func (s *scraper) run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		if err := s.scrapeOnce(ctx); err != nil {
			s.mu.Lock()
			s.errs++
			s.last = nil
			s.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *scraper) failures() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.errs
}

// latest is the last read, NaN for a group the last scrape did not see.
func (s *scraper) latest() []GroupSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]GroupSample, len(s.groups))
	for i, name := range s.groups {
		v, ok := s.last[name]
		if !ok {
			v = GroupSample{Group: name, Load: math.NaN(), Workers: math.NaN()}
		}
		out[i] = v
	}
	return out
}
