package engine

import (
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/emiago/sipgo/sip"

	"github.com/sipvisor/sipvisor/internal/sipmsg"
	"github.com/sipvisor/sipvisor/script"
)

// msgCtx is the processing of one message by the script: the message, the
// destination set so far, script variables and what the script asked of the
// transaction.
type msgCtx struct {
	w   *Worker
	req *sip.Request
	res *sip.Response
	src source

	// m is the request on its bytes until decode makes req of it, and
	// bs what the script changed of it so far (fast.go).
	m  *sipmsg.Msg
	bs *bytesState

	du   string
	vars map[string]string
	// flowDu is the $du lookup or loose_route set to a phone's flow
	// (flow.go), flowOb whether the phone asked for outbound: while $du is
	// still that, the request goes over the flow or is answered 480/430.
	flowDu string
	flowOb bool
	// flowCaller: the flow is a caller's connection (flowTokenCaller).
	flowCaller bool

	// stx is the request's server transaction once t_relay made one, or the
	// one a failure_route or onreply_route runs for.
	stx                *serverTx
	onReply, onFailure string
	rr, rrDone         bool
	inFailure          bool

	rsCode   int
	rsReason string

	// ds is what ds_select_dst chose; fr and frInv what t_set_fr set.
	ds        *dsRoute
	fr, frInv time.Duration

	// raw is the request as received, for a request read from a UDP
	// socket while the main route runs for it; nil otherwise.
	raw []byte

	stopped bool // exit, drop or an absorbed retransmission
	auth    authState
	natReg  bool // fix_nated_register: save() records the source
	dropped bool
	depth   int
}

func (w *Worker) newCtx(req *sip.Request, res *sip.Response, src source) *msgCtx {
	c := &msgCtx{w: w, req: req, res: res, src: src}
	if res != nil {
		c.rsCode, c.rsReason = res.StatusCode, res.Reason
	}
	return c
}

// flow is how a block ended.
type flow uint8

const (
	flowNext flow = iota
	flowReturn
	flowExit
)

// maxDepth stops a route that calls itself from exhausting the stack.
const maxDepth = 100

func (c *msgCtx) run(b *script.Block) {
	if b == nil {
		return
	}
	c.block(b)
}

func (c *msgCtx) block(b *script.Block) flow {
	for _, st := range b.Stmts {
		// A function that answered the request and ended the script
		// (ds_select_dst refusing what RFC 7339 feedback shed) may do so
		// inside a condition: the block it guards runs no further.
		if c.stopped {
			return flowExit
		}
		if f := c.stmt(st); f != flowNext {
			return f
		}
		if c.stopped {
			return flowExit
		}
	}
	return flowNext
}

func (c *msgCtx) stmt(st script.Stmt) flow {
	switch s := st.(type) {
	case *script.If:
		if c.cond(s.Cond) {
			return c.block(s.Then)
		} else if s.Else != nil {
			return c.block(s.Else)
		}
	case *script.Call:
		c.call(s)
	case *script.Assign:
		c.assign(s.Left, c.eval(s.Right))
	case *script.Exit:
		c.stopped = true
		return flowExit
	case *script.Drop:
		c.stopped, c.dropped = true, true
		return flowExit
	case *script.Return:
		if s.HasCode && s.Code == 0 {
			c.stopped = true // OpenSIPS: return(0) ends the script
			return flowExit
		}
		return flowReturn
	case *script.RouteCall:
		blk := c.w.opt.Script.Routes[s.Name]
		if blk == nil {
			c.w.log.Warn("route not defined", "route", s.Name, "at", s.Pos.String())
			return flowNext
		}
		if c.depth >= maxDepth {
			c.w.log.Warn("route nesting too deep", "route", s.Name, "at", s.Pos.String())
			c.stopped = true
			return flowExit
		}
		c.depth++
		f := c.block(blk)
		c.depth--
		if f == flowExit {
			return flowExit
		}
	}
	return flowNext
}

// value is what an expression yields: a string, or an integer when isInt.
type value struct {
	s     string
	i     int64
	isInt bool
}

func (v value) str() string {
	if v.isInt {
		return strconv.FormatInt(v.i, 10)
	}
	return v.s
}

func (v value) num() (int64, bool) {
	if v.isInt {
		return v.i, true
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v.s), 10, 64)
	return n, err == nil
}

func (v value) truth() bool {
	if v.isInt {
		return v.i != 0
	}
	return v.s != "" && v.s != "0"
}

func (c *msgCtx) cond(e script.Expr) bool {
	switch x := e.(type) {
	case *script.Call:
		return c.call(x)
	case *script.Not:
		return !c.cond(x.X)
	case *script.Binary:
		switch x.Op {
		case "&&":
			return c.cond(x.Left) && c.cond(x.Right)
		case "||":
			return c.cond(x.Left) || c.cond(x.Right)
		}
		return c.compare(x)
	case *script.Myself:
		return true
	}
	return c.eval(e).truth()
}

func (c *msgCtx) eval(e script.Expr) value {
	switch x := e.(type) {
	case *script.Literal:
		if x.IsInt {
			return value{i: x.Int, isInt: true}
		}
		return value{s: c.expand(x)}
	case *script.PseudoVar:
		return c.get(x)
	case *script.Call, *script.Not, *script.Binary:
		if c.cond(e) {
			return value{i: 1, isInt: true}
		}
		return value{i: 0, isInt: true}
	}
	return value{}
}

func (c *msgCtx) compare(x *script.Binary) bool {
	_, lm := x.Left.(*script.Myself)
	_, rm := x.Right.(*script.Myself)
	if lm || rm {
		other := x.Left
		if lm {
			other = x.Right
		}
		is := c.w.uriIsMyself(c.eval(other).str())
		if x.Op == "!=" {
			return !is
		}
		return x.Op == "==" && is
	}
	l, r := c.eval(x.Left), c.eval(x.Right)
	switch x.Op {
	case "=~", "!~":
		re := c.w.regexpFor(r.str())
		if re == nil {
			return false
		}
		m := re.MatchString(l.str())
		return m == (x.Op == "=~")
	case "==", "!=":
		eq := l.str() == r.str()
		if l.isInt || r.isInt {
			a, ok1 := l.num()
			b, ok2 := r.num()
			eq = ok1 && ok2 && a == b
		}
		return eq == (x.Op == "==")
	}
	a, ok1 := l.num()
	b, ok2 := r.num()
	if !ok1 || !ok2 {
		return false
	}
	switch x.Op {
	case "<":
		return a < b
	case ">":
		return a > b
	case "<=":
		return a <= b
	case ">=":
		return a >= b
	}
	return false
}

type regexpEntry struct{ re *regexp.Regexp }

// regexpFor compiles a pattern once. Matching ignores case, as OpenSIPS's
// =~ does (POSIX REG_ICASE).
func (w *Worker) regexpFor(p string) *regexp.Regexp {
	if e, ok := w.regex[p]; ok {
		return e.re
	}
	re, err := regexp.Compile("(?i)" + p)
	if err != nil {
		w.log.Warn("bad regular expression", "pattern", p, "error", err)
		re = nil
	}
	if len(w.regex) > 1024 {
		clear(w.regex) // patterns built from message data must not grow without end
	}
	w.regex[p] = &regexpEntry{re: re}
	return re
}

// tmplPart is a piece of a string argument: literal text, or a
// pseudo-variable to expand.
type tmplPart struct {
	text string
	pv   *script.PseudoVar
}

// expand returns a string literal with its pseudo-variables replaced.
func (c *msgCtx) expand(l *script.Literal) string {
	if l.IsInt {
		return strconv.FormatInt(l.Int, 10)
	}
	if !strings.Contains(l.Str, "$") {
		return l.Str
	}
	parts, ok := c.w.tmpl[l]
	if !ok {
		parts = parseTemplate(l)
		c.w.tmpl[l] = parts
	}
	var b strings.Builder
	for _, p := range parts {
		if p.pv != nil {
			b.WriteString(c.get(p.pv).str())
		} else {
			b.WriteString(p.text)
		}
	}
	return b.String()
}

// parseTemplate splits "text $ru and $hdr(Name)" into parts; a $ not
// followed by a known pseudo-variable stays text.
func parseTemplate(l *script.Literal) []tmplPart {
	s := l.Str
	var parts []tmplPart
	text := func(t string) {
		if t == "" {
			return
		}
		if n := len(parts); n > 0 && parts[n-1].pv == nil {
			parts[n-1].text += t
			return
		}
		parts = append(parts, tmplPart{text: t})
	}
	for {
		i := strings.IndexByte(s, '$')
		if i < 0 {
			text(s)
			return parts
		}
		text(s[:i])
		rest := s[i+1:]
		j := 0
		for j < len(rest) && (isAlnum(rest[j]) || rest[j] == '_') {
			j++
		}
		name := rest[:j]
		spec, ok := script.PseudoVars[name]
		if !ok {
			text("$")
			s = rest
			continue
		}
		pv := &script.PseudoVar{Pos: l.Pos, Name: name}
		if spec.HasArg {
			if j < len(rest) && rest[j] == '(' {
				k := strings.IndexByte(rest[j:], ')')
				if k < 0 {
					text("$" + rest)
					return parts
				}
				pv.Arg = rest[j+1 : j+k]
				j += k + 1
			} else {
				text("$")
				s = rest
				continue
			}
		}
		parts = append(parts, tmplPart{pv: pv})
		s = rest[j:]
	}
}

func isAlnum(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
}

// msg is the message pseudo-variables read: the request, else the reply.
func (c *msgCtx) msg() sip.Message {
	if c.req != nil {
		return c.req
	}
	if c.res != nil {
		return c.res
	}
	return nil
}

// get reads a pseudo-variable; one with nothing to read is "".
func (c *msgCtx) get(v *script.PseudoVar) value {
	switch v.Name {
	case "var", "du", "si", "sp", "pr", "rs", "rr":
		// Not the message's: read on the bytes as well.
	default:
		c.decode()
	}
	m := c.msg()
	switch v.Name {
	case "var":
		return value{s: c.vars[v.Arg]}
	case "du":
		return value{s: c.du}
	case "si":
		if c.src.addr.IsValid() {
			return value{s: c.src.addr.Addr().String()}
		}
		return value{}
	case "sp":
		if c.src.addr.IsValid() {
			return value{i: int64(c.src.addr.Port()), isInt: true}
		}
		return value{}
	case "pr":
		// Kamailio's names for the transports, lower-case.
		return value{s: c.src.proto}
	case "rs":
		if c.rsCode == 0 {
			return value{}
		}
		return value{i: int64(c.rsCode), isInt: true}
	case "rr":
		return value{s: c.rsReason}
	}
	if m == nil {
		return value{}
	}
	switch v.Name {
	case "rm":
		if c.req != nil {
			return value{s: string(c.req.Method)}
		}
		return value{s: methodOf(m)}
	case "ru", "rU", "rd", "rp":
		if c.req == nil {
			return value{}
		}
		u := &c.req.Recipient
		switch v.Name {
		case "ru":
			return value{s: u.String()}
		case "rU":
			return value{s: u.User}
		case "rd":
			return value{s: u.Host}
		default:
			if u.Port == 0 {
				return value{i: 5060, isInt: true}
			}
			return value{i: int64(u.Port), isInt: true}
		}
	case "fu", "fU", "fd":
		return uriPart(&m.From().Address, v.Name[1])
	case "tu", "tU", "td":
		return uriPart(&m.To().Address, v.Name[1])
	case "ci":
		return value{s: string(*m.CallID())}
	case "ua":
		return value{s: headerValue(m, "User-Agent")}
	case "ct":
		return value{s: headerValue(m, "Contact")}
	case "hdr":
		return value{s: headerValue(m, v.Arg)}
	}
	return value{}
}

func uriPart(u *sip.Uri, part byte) value {
	switch part {
	case 'U':
		return value{s: u.User}
	case 'd':
		return value{s: u.Host}
	}
	return value{s: u.String()}
}

// compactNames maps RFC 3261 compact header names to full ones.
var compactNames = map[string]string{
	"v": "via", "f": "from", "t": "to", "i": "call-id", "m": "contact",
	"l": "content-length", "c": "content-type", "k": "supported", "s": "subject",
	"e": "content-encoding", "o": "event", "r": "refer-to", "b": "referred-by", "u": "allow-events",
}

func headerName(name string) string {
	n := strings.ToLower(strings.TrimSpace(name))
	if full, ok := compactNames[n]; ok {
		return full
	}
	return n
}

// headerValue is the value of the first header called name, as OpenSIPS's
// $hdr(name) gives it.
func headerValue(m sip.Message, name string) string {
	want := headerName(name)
	for _, h := range headersOf(m) {
		if headerName(h.Name()) == want {
			return h.Value()
		}
	}
	return ""
}

func headersOf(m sip.Message) []sip.Header {
	switch x := m.(type) {
	case *sip.Request:
		return x.Headers()
	case *sip.Response:
		return x.Headers()
	}
	return nil
}

// assign sets a writable pseudo-variable; a value that is not a valid URI
// leaves the variable as it was and logs why.
func (c *msgCtx) assign(v *script.PseudoVar, val value) {
	if v.Name != "var" && v.Name != "du" {
		c.decode() // the others change the message
	}
	s := val.str()
	switch v.Name {
	case "var":
		if c.vars == nil {
			c.vars = map[string]string{}
		}
		c.vars[v.Arg] = s
	case "du":
		c.du = s
	case "ru":
		if c.req == nil {
			return
		}
		var u sip.Uri
		if err := sip.ParseUri(strings.Trim(s, "<> "), &u); err != nil || u.Host == "" {
			c.w.log.Warn("$ru assignment is not a sip uri", "value", s, "at", v.Pos.String())
			return
		}
		c.req.Recipient = u
	case "rU":
		if c.req != nil {
			c.req.Recipient.User = s
		}
	}
}
