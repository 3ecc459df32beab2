package oc

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The Via parameters of RFC 7339, and its one algorithm that every client
// and server supports.
const (
	ParamOC       = "oc"
	ParamAlgo     = "oc-algo"
	ParamValidity = "oc-validity"
	ParamSeq      = "oc-seq"
	AlgoLoss      = "loss"
)

// DefaultValidity is how long feedback without oc-validity holds (RFC 7339
// 5.2).
const DefaultValidity = 500 * time.Millisecond

// MaxValidity bounds an oc-validity taken from a peer: a typo or a hostile
// server cannot hold a destination at its loss for days.
const MaxValidity = time.Hour

// Seq is an oc-seq: "seconds.fraction", a timestamp that grows with each
// new value a server sends. Frac holds the fraction in units of 10^-6.
type Seq struct {
	Sec, Frac uint64
}

// SeqAt is the oc-seq of a value set at t, to the millisecond.
func SeqAt(t time.Time) Seq {
	ms := t.UnixMilli()
	if ms < 0 {
		ms = 0
	}
	return Seq{Sec: uint64(ms / 1000), Frac: uint64(ms%1000) * 1000}
}

// After reports whether s is newer than o.
func (s Seq) After(o Seq) bool {
	return s.Sec > o.Sec || s.Sec == o.Sec && s.Frac > o.Frac
}

// Next is the least Seq after s that SeqAt can write: one millisecond on.
func (s Seq) Next() Seq {
	s.Frac = s.Frac/1000*1000 + 1000
	if s.Frac >= 1e6 {
		s.Sec, s.Frac = s.Sec+1, s.Frac-1e6
	}
	return s
}

// String writes s as a server sends it: seconds, a dot, three digits.
func (s Seq) String() string {
	var b []byte
	return string(s.append(b))
}

func (s Seq) append(b []byte) []byte {
	b = strconv.AppendUint(b, s.Sec, 10)
	ms := s.Frac / 1000
	return append(b, '.', byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10))
}

// ParseSeq reads an oc-seq: 1 to 12 digits, optionally a dot and 1 to 6
// more (RFC 7339 allows 5; a microsecond more is read, not refused).
func ParseSeq(v string) (Seq, error) {
	sec, frac, dot := strings.Cut(v, ".")
	if sec == "" || len(sec) > 12 || !digits(sec) || dot && (frac == "" || len(frac) > 6 || !digits(frac)) {
		return Seq{}, fmt.Errorf("oc-seq %q: want seconds.fraction, such as 1282321615.782", v)
	}
	s, _ := strconv.ParseUint(sec, 10, 64)
	var f uint64
	if dot {
		f, _ = strconv.ParseUint(frac+strings.Repeat("0", 6-len(frac)), 10, 64)
	}
	return Seq{Sec: s, Frac: f}, nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Via is what a Via value says of overload control.
type Via struct {
	// OC: the oc parameter is there, with a value or without. In a
	// request's Via, its sender supports overload control.
	OC bool
	// Algos is oc-algo's value, unquoted: the algorithms a client offers
	// ("loss" or "loss,rate"), the one a server chose. Empty when absent.
	Algos string
	// The feedback of a response: oc's value, oc-validity and oc-seq,
	// each when present (Has*).
	HasLoss, HasValidity, HasSeq bool
	Loss                         int
	Validity                     time.Duration
	Seq                          Seq
}

// Feedback is a server's word to its client: shed Loss percent of the new
// requests, for Validity from now. Validity 0 ends overload control.
type Feedback struct {
	Loss     int
	Validity time.Duration
	Seq      Seq
}

// OffersLoss reports whether the client offers the loss algorithm: it
// names it in oc-algo, or names none (loss is the default).
func (v *Via) OffersLoss() bool {
	if v.Algos == "" {
		return true
	}
	for _, a := range strings.Split(v.Algos, ",") {
		if strings.EqualFold(strings.TrimSpace(a), AlgoLoss) {
			return true
		}
	}
	return false
}

// Feedback is the feedback a response's Via carries, and whether it
// carries any a client may take: an oc value, an oc-seq, and the loss
// algorithm (or none named).
func (v *Via) Feedback() (Feedback, bool) {
	if !v.HasLoss || !v.HasSeq || !v.OffersLoss() {
		return Feedback{}, false
	}
	fb := Feedback{Loss: v.Loss, Validity: DefaultValidity, Seq: v.Seq}
	if v.HasValidity {
		fb.Validity = v.Validity
	}
	return fb, true
}

// ParseVia reads the overload control parameters of one Via value
// ("SIP/2.0/UDP host;branch=...;oc"). Other parameters are skipped; an oc
// parameter whose value is not what RFC 7339 allows is an error, and so is
// the Via's feedback then, rather than a guess.
func ParseVia(via []byte) (Via, error) {
	var v Via
	var err error
	eachParam(via, func(name, val []byte, hasVal bool) bool {
		switch {
		case equalFold(name, ParamOC):
			v.OC = true
			if hasVal {
				n, e := strconv.Atoi(string(val))
				if e != nil || n < 0 || n > 100 {
					err = fmt.Errorf("oc=%s: want a percent, 0 to 100", val)
					return false
				}
				v.HasLoss, v.Loss = true, n
			}
		case equalFold(name, ParamAlgo):
			v.Algos = string(bytes.Trim(val, `"`))
		case equalFold(name, ParamValidity):
			n, e := strconv.ParseUint(string(val), 10, 32)
			if e != nil {
				err = fmt.Errorf("oc-validity=%s: want milliseconds", val)
				return false
			}
			v.HasValidity, v.Validity = true, min(time.Duration(n)*time.Millisecond, MaxValidity)
		case equalFold(name, ParamSeq):
			s, e := ParseSeq(string(val))
			if e != nil {
				err = e
				return false
			}
			v.HasSeq, v.Seq = true, s
		}
		return true
	})
	return v, err
}

// eachParam calls fn with each ";name[=value]" of a Via value, the value
// unquoted of nothing; fn returns false to stop.
func eachParam(via []byte, fn func(name, val []byte, hasVal bool) bool) {
	i := bytes.IndexByte(via, ';')
	for i >= 0 && i < len(via) {
		i++ // past ';'
		end := paramEnd(via, i)
		p := bytes.TrimSpace(via[i:end])
		name, val, has := bytes.Cut(p, []byte("="))
		if !fn(bytes.TrimSpace(name), bytes.TrimSpace(val), has) {
			return
		}
		if end >= len(via) {
			return
		}
		i = end
	}
}

// paramEnd is where the parameter starting at i ends: its ';', or the end
// of the value; a quoted string may hold either.
func paramEnd(b []byte, i int) int {
	q := false
	for ; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			q = !q
		case c == '\\' && q:
			i++
		case c == ';' && !q:
			return i
		}
	}
	return len(b)
}

func equalFold(b []byte, s string) bool {
	return len(b) == len(s) && strings.EqualFold(string(b), s)
}

// AppendFeedback appends a response's feedback parameters to a Via value:
// ";oc=N;oc-algo="loss";oc-validity=MS;oc-seq=S".
func AppendFeedback(b []byte, fb Feedback) []byte {
	b = append(b, ";oc="...)
	b = strconv.AppendInt(b, int64(min(max(fb.Loss, 0), 100)), 10)
	b = append(b, `;oc-algo="loss";oc-validity=`...)
	b = strconv.AppendInt(b, fb.Validity.Milliseconds(), 10)
	b = append(b, ";oc-seq="...)
	return fb.Seq.append(b)
}

// AppendOffer appends what a client adds to the Via of a request it sends:
// ";oc;oc-algo="loss"".
func AppendOffer(b []byte) []byte { return append(b, `;oc;oc-algo="loss"`...) }

// AppendStamped appends a Via value with its overload control parameters
// replaced by the feedback fb: what a server writes into the top Via of a
// response to a request whose Via offered oc.
func AppendStamped(b, via []byte, fb Feedback) []byte {
	i := bytes.IndexByte(via, ';')
	if i < 0 {
		return AppendFeedback(append(b, via...), fb)
	}
	b = append(b, bytes.TrimRight(via[:i], " \t")...)
	for i < len(via) {
		end := paramEnd(via, i+1)
		p := bytes.TrimSpace(via[i+1 : end])
		name, _, _ := bytes.Cut(p, []byte("="))
		name = bytes.TrimSpace(name)
		if !equalFold(name, ParamOC) && !equalFold(name, ParamAlgo) && !equalFold(name, ParamValidity) && !equalFold(name, ParamSeq) && len(p) > 0 {
			b = append(b, ';')
			b = append(b, p...)
		}
		i = end
	}
	return AppendFeedback(b, fb)
}

// TopVia finds the first Via value of a SIP message: its bounds in msg,
// and false when the message has no Via before its body. A Via header
// folded over several lines is not found: RFC 3261 allows it, no sender
// here writes it, and rewriting it would cost every response a copy.
func TopVia(msg []byte) (start, end int, ok bool) {
	nl := bytes.IndexByte(msg, '\n')
	for nl >= 0 && nl+1 < len(msg) {
		ls := nl + 1
		next := bytes.IndexByte(msg[ls:], '\n')
		le := len(msg)
		if next >= 0 {
			le = ls + next
		}
		line := msg[ls:le]
		if len(bytes.TrimRight(line, "\r")) == 0 {
			return 0, 0, false // the end of the headers
		}
		colon := bytes.IndexByte(line, ':')
		if colon > 0 {
			name := bytes.TrimSpace(line[:colon])
			if equalFold(name, "via") || equalFold(name, "v") {
				if next >= 0 && le+1 < len(msg) && (msg[le+1] == ' ' || msg[le+1] == '\t') {
					return 0, 0, false
				}
				vs := ls + colon + 1
				for vs < le && (msg[vs] == ' ' || msg[vs] == '\t') {
					vs++
				}
				ve := vs + valueEnd(msg[vs:le])
				for ve > vs && (msg[ve-1] == ' ' || msg[ve-1] == '\t' || msg[ve-1] == '\r') {
					ve--
				}
				return vs, ve, ve > vs
			}
		}
		if next < 0 {
			break
		}
		nl = le
	}
	return 0, 0, false
}

// valueEnd is where the first value of a Via line ends: its comma outside
// a quoted string (oc-algo="loss,rate" holds one), or the line's end.
func valueEnd(b []byte) int {
	q := false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			q = !q
		case c == '\\' && q:
			i++
		case c == ',' && !q:
			return i
		}
	}
	return len(b)
}

// StampResponse returns a response with fb written into its top Via when
// that Via offered overload control with the loss algorithm, and the
// response itself, unchanged and uncopied, otherwise: what a server does to
// every response it sends upstream. A response without ";oc" anywhere costs
// one search.
func StampResponse(msg []byte, fb Feedback) ([]byte, bool) {
	if !mayOffer(msg) {
		return msg, false
	}
	s, e, ok := TopVia(msg)
	if !ok {
		return msg, false
	}
	v, err := ParseVia(msg[s:e])
	if err != nil || !v.OC || !v.OffersLoss() {
		return msg, false
	}
	out := make([]byte, 0, len(msg)+80)
	out = append(out, msg[:s]...)
	out = AppendStamped(out, msg[s:e], fb)
	return append(out, msg[e:]...), true
}

// mayOffer is the cheap test before TopVia: ";oc" in any case.
func mayOffer(msg []byte) bool {
	for i := 0; ; {
		j := bytes.IndexByte(msg[i:], ';')
		if j < 0 || i+j+2 >= len(msg) {
			return false
		}
		i += j + 1
		if (msg[i]|0x20) == 'o' && (msg[i+1]|0x20) == 'c' {
			return true
		}
	}
}

// ResponseFeedback reads the feedback in a response's top Via (the Via of
// the request the reader sent), and whether there was any to take.
func ResponseFeedback(msg []byte) (Feedback, bool) {
	if !mayOffer(msg) {
		return Feedback{}, false
	}
	s, e, ok := TopVia(msg)
	if !ok {
		return Feedback{}, false
	}
	v, err := ParseVia(msg[s:e])
	if err != nil {
		return Feedback{}, false
	}
	return v.Feedback()
}

// AddOffer returns a request with oc and oc-algo="loss" added to its top
// Via, as a client that supports overload control sends it; a response, a
// message without a Via, or a Via that offers oc already is returned as it
// is.
func AddOffer(msg []byte) []byte {
	if len(msg) < 8 || string(msg[:8]) == "SIP/2.0 " {
		return msg
	}
	s, e, ok := TopVia(msg)
	if !ok {
		return msg
	}
	if v, err := ParseVia(msg[s:e]); err != nil || v.OC {
		return msg
	}
	out := make([]byte, 0, len(msg)+20)
	out = AppendOffer(append(out, msg[:e]...))
	return append(out, msg[e:]...)
}
