package dispatcher

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/emiago/sipgo/sip"
)

// Flags of a destination, in the list's third column, as Kamailio numbers
// them.
const (
	FlagInactive = 1 // starts inactive; a probe answered brings it up
	FlagTrying   = 2 // Kamailio's "trying": accepted, means nothing more here
	FlagDisabled = 4 // never selected, never probed
	FlagProbing  = 8 // Kamailio probes only these by default; here every destination is probed
)

// Dest is one destination of a set: one line of the list.
type Dest struct {
	Set      int    `json:"set"`
	URI      string `json:"uri"`
	Flags    int    `json:"flags"`
	Priority int    `json:"priority"`
	Attrs    string `json:"attrs,omitempty"`
	// Weight is the attrs' weight=N (default 1): a destination's share
	// under the weight algorithm.
	Weight int `json:"weight"`
	// Line is the line of the list it came from.
	Line int `json:"-"`
}

// Key names a destination across lists: its set and URI.
func (d *Dest) Key() string { return strconv.Itoa(d.Set) + " " + d.URI }

// LineError is a problem with one line of a list.
type LineError struct {
	Line, Col int
	Msg       string
}

func (e *LineError) Error() string { return fmt.Sprintf("%d:%d: %s", e.Line, e.Col, e.Msg) }

// MaxWeight bounds weight=N.
const MaxWeight = 10000

// Parse reads a list in Kamailio's dispatcher.list format: one destination
// a line, `SETID URI [FLAGS [PRIORITY [ATTRS]]]`, fields separated by
// blanks, `#` starting a comment. It returns every destination, and every
// problem with its line and column.
func Parse(src []byte) ([]Dest, []*LineError) {
	var out []Dest
	var errs []*LineError
	seen := map[string]int{}
	for n, line := range strings.Split(string(src), "\n") {
		ln := n + 1
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fields, cols := split(strings.TrimRight(line, "\r"))
		if len(fields) == 0 {
			continue
		}
		bad := func(i int, format string, args ...any) {
			errs = append(errs, &LineError{Line: ln, Col: cols[i], Msg: fmt.Sprintf(format, args...)})
		}
		if len(fields) < 2 {
			bad(0, "want SETID URI [FLAGS [PRIORITY [ATTRS]]]")
			continue
		}
		if len(fields) > 5 {
			bad(5, "unexpected %q after the attributes; write attributes without blanks, separated by ';'", fields[5])
			continue
		}
		d := Dest{URI: fields[1], Weight: 1, Line: ln}
		var err error
		if d.Set, err = strconv.Atoi(fields[0]); err != nil || d.Set < 0 {
			bad(0, "set id %q: want a whole number, 0 or more", fields[0])
			continue
		}
		if msg := checkURI(d.URI); msg != "" {
			bad(1, "%s", msg)
			continue
		}
		if len(fields) > 2 {
			if d.Flags, err = strconv.Atoi(fields[2]); err != nil || d.Flags < 0 || d.Flags > 15 {
				bad(2, "flags %q: want a sum of 1 (inactive), 2 (trying), 4 (disabled), 8 (probing)", fields[2])
				continue
			}
		}
		if len(fields) > 3 {
			if d.Priority, err = strconv.Atoi(fields[3]); err != nil {
				bad(3, "priority %q: want a whole number", fields[3])
				continue
			}
		}
		if len(fields) > 4 {
			d.Attrs = fields[4]
			if msg := d.readAttrs(); msg != "" {
				bad(4, "%s", msg)
				continue
			}
		}
		if prev, ok := seen[d.Key()]; ok {
			bad(1, "%s is in set %d already, at line %d", d.URI, d.Set, prev)
			continue
		}
		seen[d.Key()] = ln
		out = append(out, d)
	}
	return out, errs
}

// split cuts a line at blanks, with the column (from 1) of each field.
func split(line string) (fields []string, cols []int) {
	start := -1
	for i := 0; i <= len(line); i++ {
		blank := i == len(line) || line[i] == ' ' || line[i] == '\t'
		switch {
		case blank && start >= 0:
			fields, cols = append(fields, line[start:i]), append(cols, start+1)
			start = -1
		case !blank && start < 0:
			start = i
		}
	}
	return fields, cols
}

func checkURI(s string) string {
	if !strings.HasPrefix(s, "sip:") && !strings.HasPrefix(s, "sips:") {
		return fmt.Sprintf("destination %q: want a sip: or sips: URI such as sip:10.0.0.1:5060", s)
	}
	var u sip.Uri
	if err := sip.ParseUri(s, &u); err != nil || u.Host == "" {
		return fmt.Sprintf("destination %q: not a SIP URI with a host", s)
	}
	if u.Port < 0 || u.Port > 65535 {
		return fmt.Sprintf("destination %q: port out of range", s)
	}
	return ""
}

// readAttrs takes weight=N from the attributes; the others (duid, maxload,
// socket...) are kept as written.
func (d *Dest) readAttrs() string {
	for _, kv := range strings.Split(d.Attrs, ";") {
		k, v, _ := strings.Cut(kv, "=")
		if strings.TrimSpace(k) != "weight" {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 || n > MaxWeight {
			return fmt.Sprintf("weight %q: want a whole number from 0 to %d", v, MaxWeight)
		}
		d.Weight = n
	}
	return ""
}
