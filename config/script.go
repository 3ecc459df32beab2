package config

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/sipvisor/sipvisor/script"
)

// blockKey is how a block is named in the maps of script.Script and in
// messages.
func blockName(b *blockAST) string {
	if b.Name == nil {
		return ""
	}
	return unquote(b.Name.Val)
}

// declareBlock records a block's name before any script is converted, so a
// route(name) may come before route[name] in the file.
func (l *loader) declareBlock(b *blockAST) {
	name := blockName(b)
	p := pos(b.Pos)
	if b.Name != nil {
		p = pos(b.Name.Pos)
	}
	switch {
	case b.Kind == "failure_route" && name == "":
		l.errorf(pos(b.Pos), "failure_route needs a name: failure_route[name] { ... }")
		return
	case b.Kind == "timer_route" && (name == "" || b.Interval == nil):
		l.errorf(pos(b.Pos), "timer_route needs a name and an interval: timer_route[name, SECONDS] { ... }")
		return
	case b.Kind != "timer_route" && b.Interval != nil:
		l.errorf(pos(b.Interval.Pos), "only timer_route takes an interval")
		return
	}
	if at, dup := l.routes[b.Kind][name]; dup {
		what := b.Kind + "[" + name + "]"
		if name == "" {
			what = b.Kind
		}
		l.errorf(p, "%s is already defined at %s", what, at)
		return
	}
	l.routes[b.Kind][name] = p
}

func (l *loader) script() *script.Script {
	s := &script.Script{
		Routes:    map[string]*script.Block{},
		OnReply:   map[string]*script.Block{},
		OnFailure: map[string]*script.Block{},
	}
	for _, it := range l.items {
		b := it.Block
		if b == nil {
			continue
		}
		name := blockName(b)
		// A duplicate was reported by declareBlock; its body is still checked
		// but the first definition is the one kept.
		body := l.block(b.Body)
		switch b.Kind {
		case "route":
			if _, ok := s.Routes[name]; !ok {
				s.Routes[name] = body
			}
		case "onreply_route":
			if _, ok := s.OnReply[name]; !ok {
				s.OnReply[name] = body
			}
		case "failure_route":
			if _, ok := s.OnFailure[name]; !ok && name != "" {
				s.OnFailure[name] = body
			}
		case "timer_route":
			if name == "" || b.Interval == nil {
				continue
			}
			d, err := parseDuration(b.Interval.Val)
			if err != nil || d <= 0 {
				l.errorf(pos(b.Interval.Pos), "timer_route interval wants seconds above 0 (or a duration such as 500ms), have %q", b.Interval.Val)
				continue
			}
			s.Timers = append(s.Timers, script.Timer{Name: name, Interval: d, Body: body})
		}
	}
	return s
}

func (l *loader) block(b *bodyBlock) *script.Block {
	out := &script.Block{Pos: pos(b.Pos), Stmts: []script.Stmt{}}
	for _, st := range b.Stmts {
		if s := l.stmt(st); s != nil {
			out.Stmts = append(out.Stmts, s)
		}
	}
	return out
}

// body wraps a statement that stands in for a block (if without braces).
func (l *loader) body(st *stmtAST) *script.Block {
	if st.Block != nil {
		return l.block(st.Block)
	}
	out := &script.Block{Stmts: []script.Stmt{}}
	if s := l.stmt(st); s != nil {
		out.Pos = s.StmtPos()
		out.Stmts = append(out.Stmts, s)
	}
	return out
}

func (l *loader) stmt(st *stmtAST) script.Stmt {
	switch {
	case st.If != nil:
		n := &script.If{Pos: pos(st.If.Pos), Cond: l.or(st.If.Cond), Then: l.body(st.If.Then)}
		if st.If.Else != nil {
			n.Else = l.body(st.If.Else)
		}
		return n
	case st.Route != nil:
		name := unquote(st.Route.Name.Val)
		p := pos(st.Route.Name.Pos)
		l.checkRef("route", name, p)
		return &script.RouteCall{Pos: pos(st.Route.Pos), Name: name}
	case st.Exit != nil:
		if st.Exit.Kw == "drop" {
			return &script.Drop{Pos: pos(st.Exit.Pos)}
		}
		return &script.Exit{Pos: pos(st.Exit.Pos)}
	case st.Return != nil:
		n := &script.Return{Pos: pos(st.Return.Pos)}
		code := st.Return.Code
		if code == nil {
			code = st.Return.Code2
		}
		if code != nil {
			v, err := strconv.Atoi(code.Val)
			if err != nil {
				l.errorf(pos(code.Pos), "return wants a whole number, have %q", code.Val)
			}
			n.Code, n.HasCode = v, true
		}
		return n
	case st.Assign != nil:
		left := l.pvar(st.Assign.Left.Val, pos(st.Assign.Left.Pos))
		if left != nil {
			if spec := script.PseudoVars[left.Name]; !spec.Writable {
				l.errorf(left.Pos, "%s is read-only; a script may assign %s", left, writableNames())
			}
		}
		return &script.Assign{Pos: pos(st.Assign.Pos), Left: left, Right: l.or(st.Assign.Right)}
	case st.Call != nil:
		return l.call(st.Call)
	case st.Block != nil:
		// A bare nested block only groups statements; flatten it into an
		// if (1) so the tree keeps one shape for blocks.
		b := l.block(st.Block)
		return &script.If{Pos: b.Pos, Cond: &script.Literal{Pos: b.Pos, IsInt: true, Int: 1}, Then: b}
	}
	return nil
}

func writableNames() string {
	var w []string
	for _, n := range script.PseudoVarNames() {
		if spec := script.PseudoVars[n]; spec.Writable {
			if spec.HasArg {
				n += "(name)"
			}
			w = append(w, "$"+n)
		}
	}
	return strings.Join(w, ", ")
}

// checkRef reports a reference to a block that is not defined.
func (l *loader) checkRef(kind, name string, p script.Pos) {
	if _, ok := l.routes[kind][name]; ok {
		return
	}
	msg := fmt.Sprintf("%s[%s] is not defined", kind, name)
	var names []string
	for n := range l.routes[kind] {
		if n != "" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	if m := didYouMean(name, names); m != "" {
		msg += fmt.Sprintf("; did you mean %q?", m)
	}
	l.errorf(p, "%s", msg)
}

func (l *loader) call(c *callAST) *script.Call {
	p := pos(c.Pos)
	n := &script.Call{Pos: p, Name: c.Name, Args: []*script.Literal{}}
	for _, a := range c.Args {
		ap := pos(a.Pos)
		switch {
		case a.Str != nil:
			n.Args = append(n.Args, &script.Literal{Pos: ap, Str: unquote(*a.Str)})
		case a.Num != nil:
			v, err := strconv.ParseInt(*a.Num, 10, 64)
			if err != nil {
				l.errorf(ap, "argument wants a whole number or a quoted string, have %q", *a.Num)
			}
			n.Args = append(n.Args, &script.Literal{Pos: ap, IsInt: true, Int: v})
		case strings.HasPrefix(*a.Word, "$"):
			// A bare variable means the same as the quoted form, whose
			// pseudo-variables the engine expands at run time.
			l.pvar(*a.Word, ap)
			n.Args = append(n.Args, &script.Literal{Pos: ap, Str: *a.Word})
		default:
			l.errorf(ap, "argument %s must be quoted: %s(\"%s\")", *a.Word, c.Name, *a.Word)
			n.Args = append(n.Args, &script.Literal{Pos: ap, Str: *a.Word})
		}
	}
	spec, ok := script.Functions[c.Name]
	if !ok {
		msg := fmt.Sprintf("unknown function %s", c.Name)
		if h, ok := functionHints[c.Name]; ok {
			msg += ": " + h
		} else if m := didYouMean(c.Name, script.FunctionNames()); m != "" {
			msg += fmt.Sprintf("; did you mean %s?", m)
		}
		l.errorf(p, "%s", msg)
		return n
	}
	if k := len(n.Args); k < spec.MinArgs || k > spec.MaxArgs {
		want := strconv.Itoa(spec.MinArgs)
		if spec.MaxArgs != spec.MinArgs {
			want += " to " + strconv.Itoa(spec.MaxArgs)
		}
		plural := "s"
		if spec.MinArgs == 1 && spec.MaxArgs == 1 {
			plural = ""
		}
		l.errorf(p, "%s takes %s argument%s, have %d", c.Name, want, plural, k)
		return n
	}
	switch c.Name {
	case "t_on_reply", "t_on_failure":
		kind := map[string]string{"t_on_reply": "onreply_route", "t_on_failure": "failure_route"}[c.Name]
		a := n.Args[0]
		name := a.Str
		if a.IsInt {
			name = strconv.FormatInt(a.Int, 10)
		}
		l.checkRef(kind, name, a.Pos)
	case "ds_select_dst", "ds_is_from_list":
		l.checkDispatch(c.Name, n.Args)
	case "sl_send_reply":
		a := n.Args[0]
		if !a.IsInt && strings.Contains(a.Str, "$") {
			break // a code from a variable, checked when it is sent
		}
		if !a.IsInt {
			// Kamailio takes the code quoted, sl_send_reply("404", ...).
			if v, err := strconv.ParseInt(a.Str, 10, 64); err == nil {
				a.IsInt, a.Int, a.Str = true, v, ""
			}
		}
		if !a.IsInt || a.Int < 100 || a.Int > 699 {
			have := strconv.Quote(a.Str)
			if a.IsInt {
				have = strconv.FormatInt(a.Int, 10)
			}
			l.errorf(a.Pos, "sl_send_reply wants a status code in 100..699 first, have %s", have)
		}
	}
	return n
}

func (l *loader) pvar(text string, p script.Pos) *script.PseudoVar {
	name, arg := strings.TrimPrefix(text, "$"), ""
	if i := strings.IndexByte(name, '('); i >= 0 {
		name, arg = name[:i], strings.TrimSuffix(name[i+1:], ")")
	}
	v := &script.PseudoVar{Pos: p, Name: name, Arg: arg}
	spec, ok := script.PseudoVars[name]
	switch {
	case !ok:
		msg := fmt.Sprintf("unknown pseudo-variable $%s", name)
		m := didYouMean(name, script.PseudoVarNames())
		for _, n := range script.PseudoVarNames() {
			if n == strings.ToLower(name) {
				m = n // case is the likelier slip: $RU for $ru
			}
		}
		if m != "" {
			msg += fmt.Sprintf("; did you mean $%s?", m)
		}
		l.errorf(p, "%s", msg)
	case spec.HasArg && arg == "":
		l.errorf(p, "$%s needs a name in parentheses, such as $%s(x)", name, name)
	case !spec.HasArg && strings.Contains(text, "("):
		l.errorf(p, "$%s takes no argument", name)
	}
	return v
}

func (l *loader) or(e *orExpr) script.Expr {
	x := l.and(e.Left)
	for _, r := range e.Right {
		x = &script.Binary{Pos: pos(r.Pos), Op: "||", Left: x, Right: l.and(r)}
	}
	return x
}

func (l *loader) and(e *andExpr) script.Expr {
	x := l.cmp(e.Left)
	for _, r := range e.Right {
		x = &script.Binary{Pos: pos(r.Pos), Op: "&&", Left: x, Right: l.cmp(r)}
	}
	return x
}

func (l *loader) cmp(e *cmpExpr) script.Expr {
	x := l.unary(e.Left)
	if e.Op == "" {
		return x
	}
	y := l.unary(e.Right)
	if e.Op == "=~" || e.Op == "!~" {
		if lit, ok := y.(*script.Literal); ok && !lit.IsInt {
			if _, err := regexp.Compile(lit.Str); err != nil {
				l.errorf(lit.Pos, "bad regular expression: %v", err)
			}
		}
	}
	return &script.Binary{Pos: pos(e.Pos), Op: e.Op, Left: x, Right: y}
}

func (l *loader) unary(e *unaryExpr) script.Expr {
	if e.Not != nil {
		return &script.Not{Pos: pos(e.Pos), X: l.unary(e.Not)}
	}
	p := e.Prim
	pp := pos(p.Pos)
	switch {
	case p.Sub != nil:
		return l.or(p.Sub)
	case p.PV != nil:
		return l.pvar(*p.PV, pp)
	case p.Str != nil:
		return &script.Literal{Pos: pp, Str: unquote(*p.Str)}
	case p.Num != nil:
		v, err := strconv.ParseInt(*p.Num, 10, 64)
		if err != nil {
			l.errorf(pp, "want a whole number, have %q", *p.Num)
		}
		return &script.Literal{Pos: pp, IsInt: true, Int: v}
	case p.Call != nil:
		return l.call(p.Call)
	case p.Word != nil && *p.Word == "myself":
		return &script.Myself{Pos: pp}
	}
	word := ""
	if p.Word != nil {
		word = *p.Word
	}
	msg := fmt.Sprintf("unknown name %s; want a quoted string, a number, a $pseudo-variable, myself or a function call", word)
	if _, ok := script.Functions[word]; ok {
		msg = fmt.Sprintf("function %s needs parentheses: %s()", word, word)
	}
	l.errorf(pp, "%s", msg)
	return &script.Literal{Pos: pp, Str: word}
}
