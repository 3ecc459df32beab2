package loadgen

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// A Scenario is a SIPp XML scenario (-sf) compiled for sipload's loop: a list
// of commands each call walks through, with its messages cut into literal
// bytes and keywords so that building one is appending.
type Scenario struct {
	Name string
	File string
	cmds []*command
	vars map[string]int // call variable name -> index
	// uas: the first command waits for a request, so calls are created by
	// the peer's requests rather than by the rate schedule.
	uas bool
	// usesInf: some message reads [fieldN], so -inf must be given.
	usesInf bool
	// builtin: a scenario of sipload's own (-sn). A client one answers a
	// 401 or 407 it does not expect with -au/-ap credentials, once a call,
	// and waits for each transaction at most -recv_timeout (64*T1).
	builtin bool
}

type cmdKind uint8

const (
	cmdSend cmdKind = iota
	cmdRecv
	cmdPause
	cmdNop
)

type distKind uint8

const (
	distDefault distKind = iota // -d
	distFixed
	distUniform
	distNormal
	distExponential
	distLognormal
	distVariable
)

// command is one send, recv, pause or nop of a scenario.
type command struct {
	kind cmdKind
	line int
	name string // element name, for messages
	// send
	msg     *template
	method  string // request method; "" for a response
	retrans time.Duration
	// recv
	response  int // 0: a request is expected
	request   string
	optional  bool
	timeout   time.Duration
	rrs, auth bool
	methods   []string // request methods sent before, that a response may answer
	// pause
	dist      distKind
	p1, p2    float64 // ms: value, min/max, mean/stdev
	pauseVar  int
	timewait  bool
	lost      float64 // percent
	startRTD  bool
	rtd       bool
	next      int // -1: the following command
	test      int // with next: jump only if this variable is set; -1: always
	onTimeout int // -1: fail the call
	nextLabel string
	toLabel   string
	actions   []action
}

// ScenarioError is a scenario file problem at a line.
type ScenarioError struct {
	File string
	Line int
	Msg  string
}

func (e *ScenarioError) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg) }

// ignoredElements are SIPp statistics settings that change nothing sipload
// measures.
var ignoredElements = map[string]bool{"ResponseTimeRepartition": true, "CallLengthRepartition": true, "Reference": true}

// cosmeticAttrs change SIPp's screen, not the SIP it sends or expects.
var cosmeticAttrs = map[string]bool{"crlf": true, "hide": true, "display": true, "counter": true, "repeat_rtd": true}

// LoadScenario reads and compiles a SIPp XML scenario file. keys are the
// -key values, usable as [name] in messages; inf says whether -inf was given.
func LoadScenario(file string, keys map[string]string) (*Scenario, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return ParseScenario(file, b, keys)
}

// node is one XML element with the line it starts on.
type node struct {
	name     string
	attrs    []xml.Attr
	line     int
	children []*node
	text     []byte // CDATA and text, concatenated
	textLine int    // line of the first text byte
}

func (n *node) attr(name string) (string, bool) {
	for _, a := range n.attrs {
		if a.Name.Local == name {
			return a.Value, true
		}
	}
	return "", false
}

// ParseScenario compiles a scenario from its text; file names it in errors.
func ParseScenario(file string, src []byte, keys map[string]string) (*Scenario, error) {
	if !utf8.Valid(src) {
		// SIPp's files declare ISO-8859-1; each byte is its code point.
		var u []byte
		for _, c := range src {
			u = utf8.AppendRune(u, rune(c))
		}
		src = u
	}
	lineAt := func(off int64) int { return 1 + bytes.Count(src[:min(int(off), len(src))], []byte("\n")) }
	d := xml.NewDecoder(bytes.NewReader(src))
	d.CharsetReader = func(_ string, r io.Reader) (io.Reader, error) { return r, nil }
	d.Strict = true
	var stack []*node
	var root *node
	for {
		off := d.InputOffset()
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var se *xml.SyntaxError
			if errors.As(err, &se) {
				return nil, &ScenarioError{file, se.Line, "XML: " + se.Msg}
			}
			return nil, &ScenarioError{file, lineAt(d.InputOffset()), "XML: " + err.Error()}
		}
		switch t := tok.(type) {
		case xml.StartElement:
			n := &node{name: t.Name.Local, attrs: t.Attr, line: lineAt(off)}
			if len(stack) > 0 {
				p := stack[len(stack)-1]
				p.children = append(p.children, n)
			} else if root == nil {
				root = n
			}
			stack = append(stack, n)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 {
				p := stack[len(stack)-1]
				if len(p.text) == 0 {
					// "<![CDATA[" has no newline, so the text's lines
					// count from where its first piece starts.
					p.textLine = lineAt(off)
				}
				p.text = append(p.text, t...)
			}
		}
	}
	if root == nil || root.name != "scenario" {
		return nil, &ScenarioError{file, 1, "want a <scenario> element at the top"}
	}
	p := &parser{file: file, keys: keys, sc: &Scenario{File: file, vars: map[string]int{}}}
	p.sc.Name, _ = root.attr("name")
	if err := p.commands(root); err != nil {
		return nil, err
	}
	return p.sc, nil
}

type parser struct {
	file   string
	keys   map[string]string
	sc     *Scenario
	labels map[string]int
	sent   []string
}

func (p *parser) errf(line int, format string, a ...any) error {
	return &ScenarioError{p.file, line, fmt.Sprintf(format, a...)}
}

func (p *parser) commands(root *node) error {
	p.labels = map[string]int{}
	for _, n := range root.children {
		if ignoredElements[n.name] {
			continue
		}
		if n.name == "label" {
			id, ok := n.attr("id")
			if !ok || id == "" {
				return p.errf(n.line, "<label> needs an id")
			}
			if _, dup := p.labels[id]; dup {
				return p.errf(n.line, "label %q is defined twice", id)
			}
			p.labels[id] = len(p.sc.cmds)
			continue
		}
		c, err := p.command(n)
		if err != nil {
			return err
		}
		p.sc.cmds = append(p.sc.cmds, c)
	}
	if len(p.sc.cmds) == 0 {
		return p.errf(root.line, "the scenario has no commands")
	}
	for _, c := range p.sc.cmds {
		for _, l := range []struct {
			name string
			to   *int
		}{{c.nextLabel, &c.next}, {c.toLabel, &c.onTimeout}} {
			if l.name == "" {
				continue
			}
			i, ok := p.labels[l.name]
			if !ok {
				return p.errf(c.line, "label %q is not defined", l.name)
			}
			*l.to = i
		}
	}
	first := p.sc.cmds[0]
	p.sc.uas = first.kind == cmdRecv && first.request != ""
	if first.kind == cmdRecv && first.response != 0 {
		return p.errf(first.line, "a scenario cannot start by waiting for a response")
	}
	return nil
}

func (p *parser) command(n *node) (*command, error) {
	c := &command{line: n.line, name: n.name, next: -1, onTimeout: -1, pauseVar: -1, test: -1}
	allowed := map[string]bool{"next": true, "test": true, "lost": true, "start_rtd": true, "rtd": true}
	switch n.name {
	case "send":
		c.kind = cmdSend
		allowed["retrans"] = true
		allowed["ontimeout"] = true
	case "recv":
		c.kind = cmdRecv
		for _, a := range []string{"response", "request", "optional", "timeout", "ontimeout", "rrs", "auth"} {
			allowed[a] = true
		}
	case "pause", "timewait":
		c.kind = cmdPause
		c.timewait = n.name == "timewait"
		for _, a := range []string{"milliseconds", "distribution", "min", "max", "value", "mean", "stdev", "variable", "sanity_check"} {
			allowed[a] = true
		}
	case "nop":
		c.kind = cmdNop
	default:
		return nil, p.errf(n.line, "element <%s> is not supported", n.name)
	}
	for _, a := range n.attrs {
		name := a.Name.Local
		if allowed[name] || cosmeticAttrs[name] {
			continue
		}
		return nil, p.errf(n.line, "attribute %s of <%s> is not supported", name, n.name)
	}
	num := func(name string) (float64, bool, error) {
		v, ok := n.attr(name)
		if !ok {
			return 0, false, nil
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || f < 0 || math.IsInf(f, 0) {
			return 0, true, p.errf(n.line, "%s=%q: want a number of milliseconds", name, v)
		}
		return f, true, nil
	}
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	boolAttr := func(name string) (bool, error) {
		v, ok := n.attr(name)
		if !ok {
			return false, nil
		}
		switch strings.ToLower(v) {
		case "true", "1", "yes":
			return true, nil
		case "false", "0", "no":
			return false, nil
		}
		return false, p.errf(n.line, "%s=%q: want true or false", name, v)
	}
	c.nextLabel, _ = n.attr("next")
	if v, ok := n.attr("test"); ok {
		c.test = p.varIndex(v)
	}
	c.toLabel, _ = n.attr("ontimeout")
	if v, ok := n.attr("start_rtd"); ok && v != "" {
		c.startRTD = true
	}
	if v, ok := n.attr("rtd"); ok && v != "" && v != "false" {
		c.rtd = true
	}
	if f, ok, err := num("lost"); err != nil {
		return nil, err
	} else if ok {
		c.lost = f
	}
	// Children: the message text, and <action>.
	for _, ch := range n.children {
		if ch.name != "action" {
			return nil, p.errf(ch.line, "element <%s> inside <%s> is not supported", ch.name, n.name)
		}
		for _, a := range ch.children {
			act, err := p.action(a)
			if err != nil {
				return nil, err
			}
			c.actions = append(c.actions, act)
		}
	}
	var err error
	switch c.kind {
	case cmdSend:
		if len(bytes.TrimSpace(n.text)) == 0 {
			return nil, p.errf(n.line, "<send> has no message")
		}
		if f, ok, err := num("retrans"); err != nil {
			return nil, err
		} else if ok {
			c.retrans = ms(f)
		}
		line := n.textLine
		if line == 0 {
			line = n.line
		}
		if c.msg, err = p.template(n.text, line); err != nil {
			return nil, err
		}
		first := c.msg.firstWord()
		if first != "SIP/2.0" {
			c.method = first
			p.sent = append(p.sent, first)
		}
	case cmdRecv:
		rs, hasResp := n.attr("response")
		rq, hasReq := n.attr("request")
		switch {
		case hasResp == hasReq:
			return nil, p.errf(n.line, "<recv> needs either response= or request=")
		case hasResp:
			code, e := strconv.Atoi(strings.TrimSpace(rs))
			if e != nil || code < 100 || code > 699 {
				return nil, p.errf(n.line, "response=%q: want a status code (regular expressions are not supported)", rs)
			}
			c.response = code
			c.methods = append([]string(nil), p.sent...)
		default:
			c.request = strings.TrimSpace(rq)
		}
		if v, ok := n.attr("optional"); ok && v == "global" {
			return nil, p.errf(n.line, "optional=\"global\" is not supported")
		}
		if c.optional, err = boolAttr("optional"); err != nil {
			return nil, err
		}
		if c.rrs, err = boolAttr("rrs"); err != nil {
			return nil, err
		}
		if c.auth, err = boolAttr("auth"); err != nil {
			return nil, err
		}
		if f, ok, err := num("timeout"); err != nil {
			return nil, err
		} else if ok {
			c.timeout = ms(f)
		}
	case cmdPause:
		if err := p.pause(n, c, num); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (p *parser) pause(n *node, c *command, num func(string) (float64, bool, error)) error {
	if v, ok := n.attr("variable"); ok {
		c.dist = distVariable
		c.pauseVar = p.varIndex(v)
		return nil
	}
	get := func(names ...string) ([]float64, error) {
		out := make([]float64, len(names))
		for i, name := range names {
			f, ok, err := num(name)
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, p.errf(n.line, "<%s distribution=...> needs %s=", n.name, name)
			}
			out[i] = f
		}
		return out, nil
	}
	dist, _ := n.attr("distribution")
	var v []float64
	var err error
	switch dist {
	case "":
		if f, ok, err := num("milliseconds"); err != nil {
			return err
		} else if ok {
			c.dist, c.p1 = distFixed, f
		}
		return nil
	case "fixed":
		c.dist = distFixed
		v, err = get("value")
	case "uniform":
		c.dist = distUniform
		v, err = get("min", "max")
	case "normal":
		c.dist = distNormal
		v, err = get("mean", "stdev")
	case "exponential":
		c.dist = distExponential
		v, err = get("mean")
	case "lognormal":
		c.dist = distLognormal
		v, err = get("mean", "stdev")
	default:
		return p.errf(n.line, "distribution=%q is not supported (fixed, uniform, normal, exponential, lognormal are)", dist)
	}
	if err != nil {
		return err
	}
	c.p1 = v[0]
	if len(v) > 1 {
		c.p2 = v[1]
	}
	return nil
}

func (p *parser) varIndex(name string) int {
	if i, ok := p.sc.vars[name]; ok {
		return i
	}
	i := len(p.sc.vars)
	p.sc.vars[name] = i
	return i
}

// actionKind is the part of SIPp's <action> language sipload runs.
type actionKind uint8

const (
	actEreg actionKind = iota
	actAssign
	actAssignStr
	actAdd
	actSubtract
	actMultiply
	actDivide
	actToDouble
)

type action struct {
	kind     actionKind
	line     int
	re       *regexp.Regexp
	searchIn string // msg, hdr, body
	header   string
	checkIt  bool
	dst      []int // assign_to: the match, then each group
	src      int   // variable=
	value    float64
	str      *template
}

func (p *parser) action(n *node) (action, error) {
	a := action{line: n.line, src: -1}
	attr := func(name string) string { v, _ := n.attr(name); return v }
	assign := func() error {
		to := attr("assign_to")
		if to == "" {
			return p.errf(n.line, "<%s> needs assign_to=", n.name)
		}
		for _, v := range strings.Split(to, ",") {
			a.dst = append(a.dst, p.varIndex(strings.TrimSpace(v)))
		}
		return nil
	}
	value := func() error {
		v := attr("value")
		if v == "" {
			if s := attr("variable"); s != "" {
				a.src = p.varIndex(s)
				return nil
			}
			return p.errf(n.line, "<%s> needs value= or variable=", n.name)
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return p.errf(n.line, "<%s value=%q>: want a number", n.name, v)
		}
		a.value = f
		return nil
	}
	switch n.name {
	case "ereg":
		a.kind = actEreg
		re, err := regexp.Compile(attr("regexp"))
		if err != nil {
			return a, p.errf(n.line, "regexp=%q: %v", attr("regexp"), err)
		}
		a.re = re
		a.searchIn = attr("search_in")
		switch a.searchIn {
		case "", "msg":
			a.searchIn = "msg"
		case "hdr":
			a.header = attr("header")
			if a.header == "" {
				return a, p.errf(n.line, "<ereg search_in=\"hdr\"> needs header=")
			}
		case "body":
		default:
			return a, p.errf(n.line, "search_in=%q is not supported (msg, hdr, body are)", a.searchIn)
		}
		a.checkIt = attr("check_it") == "true"
		return a, assign()
	case "assign", "add", "subtract", "multiply", "divide":
		a.kind = map[string]actionKind{"assign": actAssign, "add": actAdd, "subtract": actSubtract, "multiply": actMultiply, "divide": actDivide}[n.name]
		if err := assign(); err != nil {
			return a, err
		}
		return a, value()
	case "assignstr":
		a.kind = actAssignStr
		t, err := p.template([]byte(attr("value")), n.line)
		if err != nil {
			return a, err
		}
		a.str = t
		return a, assign()
	case "todouble":
		a.kind = actToDouble
		if attr("variable") == "" {
			return a, p.errf(n.line, "<todouble> needs variable=")
		}
		a.src = p.varIndex(attr("variable"))
		return a, assign()
	}
	return a, p.errf(n.line, "action <%s> is not supported", n.name)
}

// kwKind is a keyword sipload fills in when it builds a message.
type kwKind uint8

const (
	kwLiteral kwKind = iota
	kwCallID
	kwBranch
	kwService
	kwRemoteIP
	kwRemotePort
	kwRemoteHost
	kwLocalIP
	kwLocalIPType
	kwLocalPort
	kwMediaIP
	kwMediaIPType
	kwMediaPort
	kwTransport
	kwLen
	kwCSeq
	kwCallNumber
	kwPID
	kwLast // [last_Name:]
	kwLastCSeqNumber
	kwLastRequestURI
	kwLastMessage
	kwPeerTagParam
	kwRoutes
	kwNextURL
	kwField
	kwVar
	kwKey
	kwAuth
	kwMsgIndex
	kwDate
	kwTimestamp
	kwUsers
	kwUserID
)

var simpleKeywords = map[string]kwKind{
	"call_id": kwCallID, "branch": kwBranch, "service": kwService, "remote_ip": kwRemoteIP,
	"remote_port": kwRemotePort, "remote_host": kwRemoteHost, "local_ip": kwLocalIP, "server_ip": kwLocalIP,
	"local_ip_type": kwLocalIPType, "local_port": kwLocalPort, "media_ip": kwMediaIP,
	"media_ip_type": kwMediaIPType, "media_port": kwMediaPort, "auto_media_port": kwMediaPort, "transport": kwTransport,
	"len": kwLen, "cseq": kwCSeq, "call_number": kwCallNumber, "pid": kwPID,
	"last_cseq_number": kwLastCSeqNumber, "last_Request_URI": kwLastRequestURI, "last_message": kwLastMessage,
	"peer_tag_param": kwPeerTagParam, "routes": kwRoutes, "next_url": kwNextURL, "msg_index": kwMsgIndex,
	"date": kwDate, "timestamp": kwTimestamp, "users": kwUsers, "userid": kwUserID,
}

// offsetKeywords take +N or -N, as SIPp's do.
var offsetKeywords = map[kwKind]bool{kwBranch: true, kwRemotePort: true, kwLocalPort: true, kwMediaPort: true,
	kwLen: true, kwCSeq: true, kwLastCSeqNumber: true, kwCallNumber: true}

type segment struct {
	kind  kwKind
	lit   []byte
	off   int
	name  string // header of [last_*], key or variable name, field file
	n     int    // field number or variable index
	line  int    // field line= (-1: the call's line)
	user  string // [authentication username= password=]
	pass  string
	atBOL bool   // the keyword starts its line: a missing [last_*] drops the line
	short string // [last_*]: the header's compact form, "" if it has none
}

// template is a message cut into segments.
type template struct {
	segs []segment
	size int // room to build it in one allocation, most of the time
}

func (t *template) firstWord() string {
	var b []byte
	for _, s := range t.segs {
		if s.kind != kwLiteral {
			break
		}
		b = append(b, s.lit...)
		if i := bytes.IndexAny(b, " \r\n"); i >= 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// template applies SIPp's message text rules: each line loses its leading
// and trailing blanks, lines end in CRLF, a message without a blank line
// gets one at its end, and a body keeps a final CRLF.
func (p *parser) template(text []byte, firstLine int) (*template, error) {
	raw := strings.Split(string(text), "\n")
	type ln struct {
		s    string
		line int
	}
	var lines []ln
	for i, l := range raw {
		lines = append(lines, ln{strings.Trim(l, " \t\r"), firstLine + i})
	}
	for len(lines) > 0 && lines[0].s == "" {
		lines = lines[1:]
	}
	trailing := 0
	for len(lines) > 0 && lines[len(lines)-1].s == "" {
		lines = lines[:len(lines)-1]
		trailing++
	}
	if len(lines) == 0 {
		return &template{}, nil
	}
	hasBlank := false
	for _, l := range lines {
		if l.s == "" {
			hasBlank = true
		}
	}
	t := &template{}
	var lit []byte
	flush := func() {
		if len(lit) > 0 {
			t.segs = append(t.segs, segment{kind: kwLiteral, lit: lit})
			lit = nil
		}
	}
	for li, l := range lines {
		s := l.s
		bol := true
		for len(s) > 0 {
			switch {
			case strings.HasPrefix(s, `\x`) && len(s) >= 4 && isHex(s[2]) && isHex(s[3]):
				v, _ := strconv.ParseUint(s[2:4], 16, 8)
				lit = append(lit, byte(v))
				s = s[4:]
			case s[0] == '[':
				end := strings.IndexByte(s, ']')
				if end < 0 {
					return nil, p.errf(l.line, "keyword %q has no closing ]", clip([]byte(s)))
				}
				seg, err := p.keyword(s[1:end], l.line)
				if err != nil {
					return nil, err
				}
				seg.atBOL = bol
				if seg.kind == kwKey {
					lit = append(lit, p.keys[seg.name]...)
				} else {
					flush()
					t.segs = append(t.segs, seg)
				}
				s = s[end+1:]
			default:
				lit = append(lit, s[0])
				s = s[1:]
			}
			bol = false
		}
		if li < len(lines)-1 || !hasBlank || trailing > 0 {
			lit = append(lit, "\r\n"...)
		}
	}
	if !hasBlank {
		lit = append(lit, "\r\n"...)
	}
	flush()
	t.size = 512
	for _, s := range t.segs {
		t.size += len(s.lit) + 16
	}
	return t, nil
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func (p *parser) keyword(k string, line int) (segment, error) {
	seg := segment{line: -1}
	if strings.HasPrefix(k, "authentication") {
		seg.kind = kwAuth
		for _, f := range strings.Fields(k[len("authentication"):]) {
			name, v, _ := strings.Cut(f, "=")
			switch name {
			case "username":
				seg.user = v
			case "password":
				seg.pass = v
			default:
				return seg, p.errf(line, "keyword [authentication %s] is not supported (username= and password= are)", f)
			}
		}
		return seg, nil
	}
	if strings.HasPrefix(k, "field") {
		f := strings.Fields(k)
		n, err := strconv.Atoi(f[0][len("field"):])
		if err != nil || n < 0 {
			return seg, p.errf(line, "keyword [%s] is not supported", k)
		}
		seg.kind, seg.n = kwField, n
		for _, a := range f[1:] {
			name, v, _ := strings.Cut(a, "=")
			switch name {
			case "file":
				seg.name = v
			case "line":
				l, err := strconv.Atoi(v)
				if err != nil || l < 0 {
					return seg, p.errf(line, "keyword [%s]: line=%q: want a number", k, v)
				}
				seg.line = l
			default:
				return seg, p.errf(line, "keyword [%s]: %s= is not supported", k, name)
			}
		}
		p.sc.usesInf = true
		return seg, nil
	}
	if strings.HasPrefix(k, "$") {
		seg.kind, seg.n = kwVar, p.varIndex(k[1:])
		return seg, nil
	}
	name, off := k, 0
	if i := strings.IndexAny(k, "+-"); i > 0 {
		n, err := strconv.Atoi(k[i:])
		if err == nil {
			name, off = k[:i], n
		}
	}
	if kind, ok := simpleKeywords[name]; ok {
		if off != 0 && !offsetKeywords[kind] {
			return seg, p.errf(line, "keyword [%s] takes no offset", k)
		}
		seg.kind, seg.off = kind, off
		return seg, nil
	}
	if h, ok := strings.CutPrefix(k, "last_"); ok {
		h = strings.TrimSuffix(strings.TrimSpace(h), ":")
		if h == "" || strings.ContainsAny(h, " []") {
			return seg, p.errf(line, "keyword [%s] names no header", k)
		}
		seg.kind, seg.name, seg.short = kwLast, h, compactForms[strings.ToLower(h)]
		return seg, nil
	}
	if _, ok := p.keys[k]; ok {
		seg.kind, seg.name = kwKey, k
		return seg, nil
	}
	return seg, p.errf(line, "keyword [%s] is not supported", k)
}

// firstMethod names the scenario's calls for sipload's metrics: the method
// of its first request, sent or awaited (the first one it must await, if
// it starts by awaiting one of several).
func (s *Scenario) firstMethod() string {
	opt := ""
	for _, c := range s.cmds {
		if c.kind == cmdSend && c.method != "" {
			return c.method
		}
		if c.kind == cmdRecv && c.request != "" {
			if !c.optional {
				return c.request
			}
			if opt == "" {
				opt = c.request
			}
		}
	}
	if opt != "" {
		return opt
	}
	return "XML"
}
