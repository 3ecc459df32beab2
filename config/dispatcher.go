package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sipvisor/sipvisor/dispatcher"
	"github.com/sipvisor/sipvisor/script"
)

// Dispatcher holds the destination sets and their probing.
type Dispatcher struct {
	// ListFile: ds_list_file = "dispatcher.list", as written.
	ListFile string `json:"list_file,omitempty"`
	// Dests: the destinations the list holds, in its order.
	Dests []dispatcher.Dest `json:"destinations,omitempty"`
	// PingInterval: ds_ping_interval (default 10s; 0 = no probes).
	PingInterval time.Duration `json:"ping_interval"`
	// ProbingThreshold: ds_probing_threshold (default 3).
	ProbingThreshold int `json:"probing_threshold"`
	// InactiveThreshold: ds_inactive_threshold (default 1).
	InactiveThreshold int `json:"inactive_threshold"`
	// PingReplyCodes: ds_ping_reply_codes, as written.
	PingReplyCodes string `json:"ping_reply_codes,omitempty"`
	// PingFrom: ds_ping_from (default sip:dispatcher@localhost).
	PingFrom string `json:"ping_from"`
	// OverloadControl: ds_overload_control (default yes).
	OverloadControl bool `json:"overload_control"`
}

// Probe is how the destinations are probed.
func (d *Dispatcher) Probe() dispatcher.Probe {
	classes, codes, _ := parseReplyCodes(d.PingReplyCodes)
	return dispatcher.Probe{
		Interval:      d.PingInterval,
		FailThreshold: d.ProbingThreshold, OKThreshold: d.InactiveThreshold,
		Alive: func(code int) bool {
			return code/100 == 2 || classes[code/100] || codes[code]
		},
	}
}

// parseReplyCodes reads ds_ping_reply_codes: "class=N;code=NNN;...".
func parseReplyCodes(s string) (classes, codes map[int]bool, err error) {
	classes, codes = map[int]bool{}, map[int]bool{}
	for _, part := range strings.Split(s, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		n, err := strconv.Atoi(strings.TrimSpace(v))
		switch strings.TrimSpace(k) {
		case "class":
			if err != nil || n < 1 || n > 6 {
				return nil, nil, fmt.Errorf("ds_ping_reply_codes: %q: a class is 1 to 6", part)
			}
			classes[n] = true
		case "code":
			if err != nil || n < 100 || n > 699 {
				return nil, nil, fmt.Errorf("ds_ping_reply_codes: %q: a code is 100 to 699", part)
			}
			codes[n] = true
		default:
			return nil, nil, fmt.Errorf("ds_ping_reply_codes: %q: want class=N or code=NNN, separated by ';'", part)
		}
	}
	return classes, codes, nil
}

// dispatcher reads and checks ds_list_file. The list is read through the
// loader, so that a config snapshot carries it and every worker reads the
// list the supervisor checked.
func (l *loader) dispatcher() {
	d := &l.cfg.Dispatcher
	if _, _, err := parseReplyCodes(d.PingReplyCodes); err != nil {
		l.errorf(l.setAt["ds_ping_reply_codes"], "%v", err)
	}
	if d.PingFrom != "" && !strings.HasPrefix(d.PingFrom, "sip:") && !strings.HasPrefix(d.PingFrom, "sips:") {
		l.errorf(l.setAt["ds_ping_from"], "ds_ping_from %q: want a sip: URI", d.PingFrom)
	}
	if d.ListFile == "" {
		return
	}
	// Made relative to the file that names it as it was set (pathSettings).
	path := d.ListFile
	src, err := l.read(path)
	if err != nil {
		l.errorf(l.setAt["ds_list_file"], "cannot read ds_list_file: %v", err)
		return
	}
	l.sources[path] = src
	l.files = append(l.files, path)
	ds, errs := dispatcher.Parse(src)
	for _, e := range errs {
		l.errorf(script.Pos{File: path, Line: e.Line, Col: e.Col}, "%s", e.Msg)
	}
	d.Dests = ds
}

// checkDispatch checks the set and algorithm of ds_select_dst, and the set
// of ds_is_from_list, when they are written as numbers.
func (l *loader) checkDispatch(name string, args []*script.Literal) {
	if len(args) == 0 {
		return
	}
	if a := args[0]; a.IsInt {
		found := false
		for _, d := range l.cfg.Dispatcher.Dests {
			found = found || int64(d.Set) == a.Int
		}
		switch {
		case found:
		case l.cfg.Dispatcher.ListFile == "":
			l.errorf(a.Pos, "%s: set %d, but no ds_list_file is set", name, a.Int)
		case !(name == "ds_is_from_list" && a.Int == -1):
			l.errorf(a.Pos, "%s: set %d is not in %s", name, a.Int, l.cfg.Dispatcher.ListFile)
		}
	}
	if name == "ds_select_dst" && len(args) > 1 && args[1].IsInt {
		if _, err := dispatcher.ParseAlg(args[1].Int); err != nil {
			l.errorf(args[1].Pos, "%v", err)
		}
	}
}
