package config

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/alecthomas/participle/v2"
	"github.com/alecthomas/participle/v2/lexer"

	"github.com/sipvisor/sipvisor/script"
)

// A file is read in three steps, so that one run reports every mistake it
// can and says each in the words of the config rather than of the grammar:
//
//  1. lexAll turns the file into tokens and goes on after a bad one;
//  2. split cuts the tokens into top-level items (a setting, a profile, a
//     block) by where lines start and braces close, and finds a block that
//     is never closed where it opens, not at the end of the file;
//  3. parseItem parses each item on its own; after an error inside a block it
//     drops the broken statement and parses again, to find the next one.
//
// Parser errors are reworded by syntaxMessage from the unexpected token and
// the first thing the grammar wanted there; no grammar name reaches a user.

// lexAll reads every token of a file. Bad input is reported and skipped.
func (l *loader) lexAll(name string, src []byte) (toks []lexer.Token, end lexer.Position, bad []int) {
	l.preprocessorLines(name, string(src))
	lx := &cfgLex{src: string(src), pos: lexer.Position{Filename: name, Line: 1, Column: 1}}
	toks = make([]lexer.Token, 0, len(src)/6) // about one token in six bytes
	for {
		t, err := lx.Next()
		if err == nil {
			if t.EOF() {
				return toks, t.Pos, bad
			}
			toks = append(toks, t)
			continue
		}
		p, msg := lx.pos, err.Error()
		var pe participle.Error
		if errors.As(err, &pe) {
			p, msg = pe.Position(), pe.Message()
		}
		l.syntaxf(pos(p), "%s", msg)
		bad = append(bad, p.Offset)
		if !lx.skipBad() {
			return toks, lx.pos, bad
		}
	}
}

// preprocessorLines reports Kamailio's #!ifdef and its kin. They read as
// comments, so without a word both of their branches would be taken.
func (l *loader) preprocessorLines(name, src string) {
	if !strings.Contains(src, "#!") {
		return
	}
	for i, line := range strings.Split(src, "\n") {
		rest := strings.TrimLeft(line, " \t")
		word, ok := strings.CutPrefix(rest, "#!")
		if !ok {
			continue
		}
		if j := strings.IndexAny(word, " \t\r"); j >= 0 {
			word = word[:j]
		}
		if kamailioDirectives[word] {
			col := utf8.RuneCountInString(line[:len(line)-len(rest)]) + 1
			l.errorf(script.Pos{File: name, Line: i + 1, Col: col}, "#!%s is a line of Kamailio's preprocessor, which sipvisor does not have: every line is read; keep the lines you want and delete the #! lines", word)
		}
	}
}

var kamailioDirectives = map[string]bool{
	"define": true, "trydef": true, "redefine": true, "ifdef": true, "ifndef": true, "else": true,
	"endif": true, "subst": true, "substdef": true, "substdefs": true, "ifexp": true, "defexp": true,
}

func (l *loader) syntaxf(p script.Pos, format string, args ...any) {
	l.syntax = true
	l.errorf(p, format, args...)
}

// chunk is the tokens of one top-level item. end is where the item stops:
// the start of the next one, or the end of the file when last is true.
type chunk struct {
	toks []lexer.Token
	end  lexer.Position
	last bool
	bad  []int // offsets of lexer errors inside the item
}

func isPunct(t lexer.Token, v string) bool {
	return (t.Type == tokPunct || t.Type == tokOp) && t.Value == v
}

// blockKinds are the blocks a config may have.
var blockKinds = map[string]bool{"route": true, "onreply_route": true, "failure_route": true, "timer_route": true}

// continues are the words that go on an item begun on an earlier line.
var continues = map[string]bool{
	"scale": true, "up": true, "down": true, "to": true, "on": true, "for": true,
	"cycles": true, "cycle": true, "within": true, "use_workers": true, "use_auto_scaling_profile": true,
}

// split cuts a file's tokens into items. An item starts on a new line, at
// the top level, with a word that cannot go on the item before; inside a
// block, a line that can only start an item (route[x] {, or a known setting
// followed by "=") means the block was never closed.
func (l *loader) split(toks []lexer.Token, end lexer.Position, bad []int) []chunk {
	indent := map[int]int{} // line → column of its first token
	for _, t := range toks {
		if _, ok := indent[t.Pos.Line]; !ok {
			indent[t.Pos.Line] = t.Pos.Column
		}
	}
	var (
		out    []chunk
		cur    []lexer.Token
		opens  []int    // indices in cur of the braces still open
		pairs  [][2]int // indices in cur of braces matched so far
		closed bool     // the item is a block whose braces all closed
	)
	flush := func(at lexer.Position, last bool) {
		if len(cur) == 0 {
			return
		}
		if len(opens) > 0 {
			// The brace that is missing is most likely the one whose block
			// another block's "}" closed at a shallower indentation.
			open := opens[len(opens)-1]
			for _, p := range pairs {
				o, c := cur[p[0]].Pos, cur[p[1]].Pos
				if indent[c.Line] == c.Column && indent[o.Line] > c.Column {
					open = p[0]
					break
				}
			}
			l.syntaxf(pos(cur[open].Pos), "block opened here is never closed: a \"}\" is missing")
			for range opens {
				cur = append(cur, lexer.Token{Type: tokPunct, Value: "}", Pos: at})
			}
		}
		c := chunk{toks: cur, end: at, last: last}
		first, next := cur[0].Pos.Offset, at.Offset
		for _, b := range bad {
			if b >= first && (b < next || last) {
				c.bad = append(c.bad, b)
			}
		}
		out = append(out, c)
		cur, opens, pairs, closed = nil, nil, nil, false
	}
	for i, t := range toks {
		if len(cur) > 0 && (closed || startsItem(toks, i, len(opens))) {
			flush(t.Pos, false)
		}
		switch {
		case isPunct(t, "{"):
			opens = append(opens, len(cur))
		case isPunct(t, "}"):
			if len(opens) == 0 {
				l.syntaxf(pos(t.Pos), "this \"}\" closes no block")
				continue
			}
			pairs = append(pairs, [2]int{opens[len(opens)-1], len(cur)})
			opens = opens[:len(opens)-1]
			closed = len(opens) == 0
		}
		cur = append(cur, t)
	}
	flush(end, true)
	return out
}

// startsItem says whether toks[i] begins a new top-level item, given how
// many braces are open in the current one.
func startsItem(toks []lexer.Token, i, depth int) bool {
	t := toks[i]
	if i > 0 && toks[i-1].Pos.Line == t.Pos.Line {
		return false
	}
	next := lexer.Token{}
	if i+1 < len(toks) {
		next = toks[i+1]
	}
	if depth == 0 {
		switch t.Type {
		case tokIdent:
			// A value may stand on the line after its "=".
			return !continues[t.Value] && !(i > 0 && (isPunct(toks[i-1], "=") || isPunct(toks[i-1], ":=")))
		case tokPV:
			return true
		}
		return false
	}
	if t.Type != tokIdent {
		return false
	}
	if blockKinds[t.Value] || foreignBlocks[t.Value] != "" {
		return isPunct(next, "[") || isPunct(next, "{")
	}
	if t.Value == "loadmodule" {
		return next.Type == tokString
	}
	_, known := settingByName[t.Value]
	return known && isPunct(next, "=")
}

// sliceLex hands participle a chunk's tokens, then an end at the chunk's end.
type sliceLex struct {
	toks []lexer.Token
	end  lexer.Position
	i    int
}

func (s *sliceLex) Next() (lexer.Token, error) {
	if s.i < len(s.toks) {
		s.i++
		return s.toks[s.i-1], nil
	}
	return lexer.EOFToken(s.end), nil
}

// parseItem parses one chunk; nil when it holds no usable item.
func (l *loader) parseItem(c chunk) *itemAST {
	toks := c.toks
	head := toks[0]
	if head.Type == tokIdent {
		if hint, ok := foreignItems[head.Value]; ok {
			l.errorf(pos(head.Pos), "%s", hint)
			return nil
		}
		if hint := foreignBlocks[head.Value]; hint != "" {
			l.errorf(pos(head.Pos), "%s", hint)
			kind, ok := blockFor[head.Value]
			if !ok {
				return nil
			}
			// Parse it as the block it stands for, so that the mistakes in
			// its body are found in the same run.
			toks = append([]lexer.Token{{Type: tokIdent, Value: kind, Pos: head.Pos}}, toks[1:]...)
		}
	}
	// A lexer error already said what is wrong; drop the statement it was in
	// so that the parser does not report it again in other words.
	for _, b := range c.bad {
		k := 0
		for k < len(toks) && toks[k].Pos.Offset < b {
			k++
		}
		s, e, ok := stmtSpan(toks, k)
		if !ok {
			return nil
		}
		// The lexer dropped the rest of the line, so the statement ends
		// there unless that would leave a brace unmatched.
		if !hasBrace(toks[s:k]) {
			e = k
		}
		toks = append(toks[:s:s], toks[e:]...)
	}
	lastAt, lastK := -1, -1
	for tries := 0; tries < maxErrors; tries++ {
		peek, err := lexer.Upgrade(&sliceLex{toks: toks, end: c.end})
		if err != nil {
			l.syntaxf(pos(head.Pos), "%v", err)
			return nil
		}
		it, err := parseKind(toks[0], peek)
		if err == nil {
			return it
		}
		k, p, msg, missing := syntaxError(c, toks, err)
		at := c.end.Offset
		if k < len(toks) {
			at = toks[k].Pos.Offset
		}
		if at == lastAt {
			// The same place again after a repair: the repair was wrong,
			// and one report of it is enough.
			missing = ""
		} else {
			l.syntaxf(p, "%s", msg)
		}
		if missing != "" && k != lastK {
			// Put in what was missing and read on, so that the rest of the
			// statement is checked as well.
			t := lexer.Token{Type: tokPunct, Value: missing, Pos: c.end}
			if k < len(toks) {
				t.Pos = toks[k].Pos
			}
			toks = append(toks[:k:k], append([]lexer.Token{t}, toks[k:]...)...)
			lastAt, lastK = at, k
			continue
		}
		s, e, ok := stmtSpan(toks, k)
		if !ok {
			return nil
		}
		toks = append(toks[:s:s], toks[e:]...)
		lastAt, lastK = at, -1
	}
	return nil
}

func hasBrace(toks []lexer.Token) bool {
	for _, t := range toks {
		if isPunct(t, "{") || isPunct(t, "}") {
			return true
		}
	}
	return false
}

// parseKind parses an item with the parser of the kind its first word
// names, and any other with the parser of every kind.
func parseKind(head lexer.Token, peek *lexer.PeekingLexer) (*itemAST, error) {
	if head.Type != tokIdent {
		return itemParser.ParseFromLexer(peek)
	}
	switch {
	case blockKinds[head.Value]:
		b, err := blockParser.ParseFromLexer(peek)
		return &itemAST{Block: b}, err
	case head.Value == "auto_scaling_profile":
		p, err := profileParser.ParseFromLexer(peek)
		return &itemAST{Profile: p}, err
	case head.Value == "include_file":
		i, err := includeParser.ParseFromLexer(peek)
		return &itemAST{Include: i}, err
	}
	return itemParser.ParseFromLexer(peek)
}

// stmtSpan finds the statement that holds toks[k] inside a block: from after
// the ";", "{" or "}" before it, to its ";" or its closing "}" (with any
// else). ok is false when toks[k] is not inside a block or nothing would be
// dropped.
func stmtSpan(toks []lexer.Token, k int) (start, end int, ok bool) {
	isElse := func(i int) bool { return i < len(toks) && toks[i].Type == tokIdent && toks[i].Value == "else" }
	depth := 0
	j := k - 1
	for ; j >= 0; j-- {
		t := toks[j]
		switch {
		case isPunct(t, "}"):
			if depth == 0 && !isElse(j+1) {
				goto found
			}
			depth++
		case isPunct(t, "{"):
			if depth == 0 {
				goto found
			}
			depth--
		case isPunct(t, ";"):
			if depth == 0 && !isElse(j+1) {
				goto found
			}
		}
	}
	return 0, 0, false
found:
	start = j + 1
	depth = 0
	end = start
	for end < len(toks) {
		t := toks[end]
		if isPunct(t, "}") && depth == 0 {
			break
		}
		end++
		switch {
		case isPunct(t, "{"):
			depth++
			continue
		case isPunct(t, "}"):
			depth--
		case !isPunct(t, ";"):
			continue
		}
		if depth == 0 && !isElse(end) {
			break
		}
	}
	if end <= k && k < len(toks) && !isPunct(toks[k], "}") {
		end = k + 1
	}
	return start, end, end > start
}

// syntaxError words a parser error in the config's words. k is the index
// of the token it is about; missing is a ";", ")" or "]" that, put in before
// that token, would let the parser read on.
func syntaxError(c chunk, toks []lexer.Token, err error) (k int, p script.Pos, msg, missing string) {
	var pe participle.Error
	if !errors.As(err, &pe) {
		return 0, pos(toks[0].Pos), err.Error(), ""
	}
	at := pe.Position()
	for k < len(toks) && toks[k].Pos.Offset < at.Offset {
		k++
	}
	var ue *participle.UnexpectedTokenError
	expect := ""
	if errors.As(err, &ue) {
		if _, e, ok := strings.Cut(ue.Message(), " (expected "); ok {
			expect = strings.TrimSuffix(e, ")")
		}
	} else if k >= len(toks) || toks[k].Pos.Offset != at.Offset {
		// Not about a token: say it as it is, without the grammar.
		msg, _, _ := strings.Cut(pe.Message(), " (expected ")
		return k, pos(at), msg, ""
	}
	p, msg, missing = describeSyntax(c, toks, k, expect)
	return k, p, msg, missing
}

// describeSyntax words the error at toks[k] (k == len(toks) for the end of
// the item), given the grammar's wish there.
func describeSyntax(c chunk, toks []lexer.Token, k int, expect string) (p script.Pos, msg, missing string) {
	var tok, prev lexer.Token
	atEnd := k >= len(toks)
	if !atEnd {
		tok = toks[k]
	} else {
		tok = lexer.Token{Type: lexer.EOF, Pos: c.end}
	}
	p = pos(tok.Pos)
	if k == 0 && !atEnd {
		return p, fmt.Sprintf("%s cannot start a line outside a block; a line is a setting (name = value), include_file, auto_scaling_profile or a block such as route { ... }", quoteTok(tok.Value)), ""
	}
	// A statement of another language is named as such, whatever the
	// grammar would have taken in its place.
	if s, _, ok := stmtSpan(toks, k); ok && s < len(toks) && s <= k {
		if h, ok := foreignStatements[toks[s].Value]; ok && toks[s].Type == tokIdent {
			return pos(toks[s].Pos), h, ""
		}
	}
	if k == 1 && blockKinds[toks[0].Value] && isPunct(tok, "[") {
		// The grammar gave the bracket up; what follows it is what is wrong.
		return p, fmt.Sprintf("want %s[NAME] { ... }, a name between the brackets", toks[0].Value), ""
	}
	prev = toks[k-1]
	newLine := atEnd || tok.Pos.Line > prev.Pos.Line
	if newLine {
		// What is missing belongs at the end of the line before.
		p = pos(prev.Pos)
		p.Col += utf8.RuneCountInString(prev.Value)
	}
	have := ""
	switch {
	case !atEnd:
		have = ", have " + quoteTok(tok.Value)
	case c.last:
		have = ", have the end of the file"
	}
	after := " after " + quoteTok(prev.Value)
	wants, noun := firstWanted(expect)
	if len(wants) == 1 {
		switch w := wants[0]; w {
		case ";", ")":
			if strings.Contains("+-*/", tok.Value) && tok.Type == tokPunct {
				return p, fmt.Sprintf("%q is not an operator of a sipvisor script; it has == != =~ !~ < <= > >= && || and !", tok.Value), ""
			}
		}
		if w := wants[0]; (w == ")" || w == ";") && isOperator(tok) && (k+1 >= len(toks) || isPunct(toks[k+1], ")") || isPunct(toks[k+1], ";") || isPunct(toks[k+1], "{")) {
			// An operator with nothing on its right.
			p = pos(tok.Pos)
			p.Col += utf8.RuneCountInString(tok.Value)
			return p, fmt.Sprintf("want a value after %s", quoteTok(tok.Value)), ""
		}
		if o, ok := unmatched(toks[:k], "(", ")"); wants[0] == ")" && ok && isValue(tok) && isValue(prev) && isCallParen(toks[:k], o) {
			return p, fmt.Sprintf(`want "," or ")" after %s, have %s`, quoteTok(prev.Value), quoteTok(tok.Value)), ""
		}
		switch w := wants[0]; w {
		case ";":
			if newLine {
				return p, `missing ";" at the end of the statement`, w
			}
			return p, `want ";" at the end of the statement` + have, w
		case ")", "]":
			open := map[string]string{")": "(", "]": "["}[w]
			if o, ok := unmatched(toks[:k], open, w); ok {
				return p, fmt.Sprintf(`missing %q to close the %q at %d:%d%s`, w, open, o.Line, o.Column, have), w
			}
		case "}":
			if !atEnd {
				return p, cannotStartStatement(toks, k), ""
			}
		}
	}
	switch {
	case len(wants) > 0:
		q := make([]string, len(wants))
		for i, w := range wants {
			q[i] = quoteTok(w)
		}
		return p, fmt.Sprintf("want %s%s%s", strings.Join(q, " or "), after, have), ""
	case noun != "":
		if noun == "a value" && k >= 2 && isPunct(prev, "(") && toks[k-2].Type == tokIdent && toks[k-2].Value == "if" {
			noun = "a condition"
		}
		return p, fmt.Sprintf("want %s%s%s", noun, after, have), ""
	case atEnd:
		return p, "the line ends too early" + after, ""
	}
	return p, fmt.Sprintf("unexpected %s%s", quoteTok(tok.Value), after), ""
}

var operators = map[string]bool{"==": true, "!=": true, "=~": true, "!~": true, "<=": true, ">=": true, "<": true, ">": true, "&&": true, "||": true}

func isOperator(t lexer.Token) bool {
	return (t.Type == tokOp || t.Type == tokPunct) && operators[t.Value]
}

// isValue says whether t can end a value: a string, a number, a variable,
// a word or a closing parenthesis.
func isValue(t lexer.Token) bool {
	switch t.Type {
	case tokString, tokNumber, tokPV, tokIdent, tokAddr:
		return true
	}
	return isPunct(t, ")")
}

// isCallParen says whether the "(" at o opens a function's arguments.
func isCallParen(toks []lexer.Token, o lexer.Position) bool {
	for i := len(toks) - 1; i > 0; i-- {
		if toks[i].Pos.Offset == o.Offset {
			prev := toks[i-1]
			return prev.Type == tokIdent && prev.Value != "if" && prev.Value != "return"
		}
	}
	return false
}

// nouns say what a grammar rule stands for; a rule missing here gives a
// message without it, never its name.
var nouns = map[string]string{
	"Tok": "a value", "NumTok": "a number", "StrTok": "a quoted file name",
	"OrExpr": "a value", "AndExpr": "a value", "CmpExpr": "a value",
	"UnaryExpr": "a value", "Primary": "a value", "StmtAST": "a statement",
	"PvTok": "a $variable", "ArgAST": "an argument", "CallAST": "a function call",
	"BodyBlock":  `"{"`,
	"ScaleUpAST": `"scale up to N on P% for C cycles"`, "ScaleDownAST": `"scale down to"`,
	"ModAST": "use_workers or use_auto_scaling_profile",
}

// firstWanted reads the first element of participle's description of what
// it expected: quoted words (one, or a group of choices) or a rule name.
func firstWanted(expect string) (words []string, noun string) {
	e := strings.TrimSpace(expect)
	if e == "" {
		return nil, ""
	}
	if e[0] == '(' {
		depth := 0
		for i := 0; i < len(e); i++ {
			switch e[i] {
			case '(':
				depth++
			case ')':
				depth--
				if depth == 0 {
					for _, alt := range strings.Split(e[1:i], " | ") {
						w, rest, ok := quotedWord(alt)
						if !ok || rest != "" {
							return nil, ""
						}
						words = append(words, w)
					}
					return words, ""
				}
			case '"':
				// skip over a quoted word, which may hold parentheses
				for i++; i < len(e) && e[i] != '"'; i++ {
					if e[i] == '\\' {
						i++
					}
				}
			}
		}
		return nil, ""
	}
	if w, _, ok := quotedWord(e); ok {
		return []string{w}, ""
	}
	name := e
	if i := strings.IndexAny(e, " *?+()|"); i >= 0 {
		name = e[:i]
	}
	return nil, nouns[name]
}

// quotedWord reads a Go-quoted word at the start of s.
func quotedWord(s string) (word, rest string, ok bool) {
	s = strings.TrimSpace(s)
	if len(s) < 2 || s[0] != '"' {
		return "", s, false
	}
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			w := strings.ReplaceAll(strings.ReplaceAll(s[1:i], `\"`, `"`), `\\`, `\`)
			return w, strings.TrimSpace(s[i+1:]), true
		}
	}
	return "", s, false
}

// quoteTok shows a token as written: a string keeps its own quotes.
func quoteTok(v string) string {
	if isQuoted(v) {
		return v
	}
	return `"` + v + `"`
}

// unmatched finds the last open bracket in toks that no close bracket after
// it answers.
func unmatched(toks []lexer.Token, open, close string) (lexer.Position, bool) {
	depth := 0
	for i := len(toks) - 1; i >= 0; i-- {
		switch {
		case isPunct(toks[i], close):
			depth++
		case isPunct(toks[i], open):
			if depth == 0 {
				return toks[i].Pos, true
			}
			depth--
		}
	}
	return lexer.Position{}, false
}

// cannotStartStatement words a statement that the script does not have,
// naming what the script has instead where the word is a known one.
func cannotStartStatement(toks []lexer.Token, k int) string {
	t := toks[k]
	if hint, ok := foreignStatements[t.Value]; ok && t.Type == tokIdent {
		return hint
	}
	if t.Type == tokIdent && k+1 < len(toks) && (isPunct(toks[k+1], "=") || isPunct(toks[k+1], ":=")) {
		return fmt.Sprintf("%s = ... assigns to a bare name; a script assigns to a $variable such as $var(%s)", t.Value, t.Value)
	}
	if t.Type == tokIdent && t.Value == "else" {
		return `"else" without an if before it`
	}
	return fmt.Sprintf("%s cannot start a statement; a statement is a function call, if, $variable = value, route(name), return, exit or drop", quoteTok(t.Value))
}
