package config

import (
	"io"
	"unicode/utf8"

	"github.com/alecthomas/participle/v2"
	"github.com/alecthomas/participle/v2/lexer"
)

// cfgLexer splits a config into tokens by hand. participle's regexp lexer did
// the same job but took half of the load time of a large config; the token
// classes below are the ones it had:
//
//	String  "..." with backslash escapes, or '...', never across a line
//	Addr    letters ":" address characters      udp:127.0.0.1:5060
//	PV      $name or $name(arg)                 $ru, $hdr(Via)
//	Number  -?digit then digits, letters, . : % - _   70%, 500ms, 5-15, 127.0.0.1:8888
//	Ident   letter or _ then letters, digits, _
//	Op      == != =~ !~ <= >= && || :=
//	Punct   one of - + * / % ! < > = ( ) { } [ ] , ; | & ~ @ . :
//
// Numbers swallow their unit so that the setting decides what the text means
// and can say what is wrong with it. Whitespace and comments are dropped here.
type cfgLexDef struct{}

var cfgLexer lexer.Definition = cfgLexDef{}

const (
	tokString lexer.TokenType = -(iota + 2)
	tokAddr
	tokPV
	tokNumber
	tokIdent
	tokOp
	tokPunct
)

func (cfgLexDef) Symbols() map[string]lexer.TokenType {
	return map[string]lexer.TokenType{
		"EOF": lexer.EOF, "String": tokString, "Addr": tokAddr, "PV": tokPV,
		"Number": tokNumber, "Ident": tokIdent, "Op": tokOp, "Punct": tokPunct,
	}
}

func (d cfgLexDef) Lex(filename string, r io.Reader) (lexer.Lexer, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	return d.LexBytes(filename, b)
}

func (cfgLexDef) LexBytes(filename string, b []byte) (lexer.Lexer, error) {
	return &cfgLex{src: string(b), pos: lexer.Position{Filename: filename, Line: 1, Column: 1}}, nil
}

func (d cfgLexDef) LexString(filename string, s string) (lexer.Lexer, error) {
	return &cfgLex{src: s, pos: lexer.Position{Filename: filename, Line: 1, Column: 1}}, nil
}

type cfgLex struct {
	src string
	pos lexer.Position
}

// advance moves the position over n bytes, counting columns in runes as
// participle does.
func (l *cfgLex) advance(n int) {
	for i := 0; i < n; i++ {
		c := l.src[l.pos.Offset]
		l.pos.Offset++
		switch {
		case c == '\n':
			l.pos.Line++
			l.pos.Column = 1
		case c < utf8.RuneSelf || c >= 0xC0:
			l.pos.Column++
		}
	}
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool  { return c >= '0' && c <= '9' }
func isWordChar(c byte) bool {
	return isLetter(c) || isDigit(c) || c == '_'
}
func isAddrChar(c byte) bool {
	return isWordChar(c) || c == '.' || c == '-' || c == '[' || c == ']' || c == ':' || c == '*'
}
func isNumberChar(c byte) bool {
	return isWordChar(c) || c == '.' || c == ':' || c == '%' || c == '-'
}

const punct = "-+*/%!<>=(){}[],;|&~@.:"

var ops = [...]string{"==", "!=", "=~", "!~", "<=", ">=", "&&", "||", ":="}

func (l *cfgLex) Next() (lexer.Token, error) {
	s := l.src
	for {
		i := l.pos.Offset
		if i >= len(s) {
			return lexer.EOFToken(l.pos), nil
		}
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			l.advance(1)
		case c == '#':
			j := i
			for j < len(s) && s[j] != '\n' {
				j++
			}
			l.advance(j - i)
		case c == '/' && i+1 < len(s) && s[i+1] == '*':
			end := indexFrom(s, "*/", i+2)
			if end < 0 {
				return lexer.Token{}, participle.Errorf(l.pos, `comment "/*" is never closed with "*/"`)
			}
			l.advance(end + 2 - i)
		default:
			return l.token(i, c)
		}
	}
}

func indexFrom(s, sub string, from int) int {
	for j := from; j+len(sub) <= len(s); j++ {
		if s[j:j+len(sub)] == sub {
			return j
		}
	}
	return -1
}

func (l *cfgLex) emit(typ lexer.TokenType, start, end int) (lexer.Token, error) {
	t := lexer.Token{Type: typ, Value: l.src[start:end], Pos: l.pos}
	l.advance(end - start)
	return t, nil
}

func (l *cfgLex) token(i int, c byte) (lexer.Token, error) {
	s := l.src
	j := i + 1
	switch {
	case c == '"':
		for j < len(s) && s[j] != '"' && s[j] != '\n' {
			if s[j] == '\\' && j+1 < len(s) && s[j+1] != '\n' {
				j++
			}
			j++
		}
		if j >= len(s) || s[j] != '"' {
			return lexer.Token{}, participle.Errorf(l.pos, "string is never closed on its line")
		}
		return l.emit(tokString, i, j+1)
	case c == '\'':
		for j < len(s) && s[j] != '\'' && s[j] != '\n' {
			j++
		}
		if j >= len(s) || s[j] != '\'' {
			return lexer.Token{}, participle.Errorf(l.pos, "string is never closed on its line")
		}
		return l.emit(tokString, i, j+1)
	case isLetter(c) || c == '_':
		for j < len(s) && isLetter(s[j]) {
			j++
		}
		if isLetter(c) && j+1 < len(s) && s[j] == ':' && isAddrChar(s[j+1]) {
			j++
			for j < len(s) && isAddrChar(s[j]) {
				j++
			}
			return l.emit(tokAddr, i, j)
		}
		for j < len(s) && isWordChar(s[j]) {
			j++
		}
		return l.emit(tokIdent, i, j)
	case c == '$' && j < len(s) && (isLetter(s[j]) || s[j] == '_'):
		for j < len(s) && isWordChar(s[j]) {
			j++
		}
		if j < len(s) && s[j] == '(' {
			k := j + 1
			for k < len(s) && s[k] != ')' && s[k] != '(' && s[k] != ' ' && s[k] != '\t' && s[k] != '\n' && s[k] != '\r' {
				k++
			}
			if k < len(s) && s[k] == ')' {
				j = k + 1
			}
		}
		return l.emit(tokPV, i, j)
	case isDigit(c) || c == '-' && j < len(s) && isDigit(s[j]):
		for j < len(s) && isNumberChar(s[j]) {
			j++
		}
		return l.emit(tokNumber, i, j)
	}
	if i+1 < len(s) {
		two := s[i : i+2]
		for _, op := range ops {
			if two == op {
				return l.emit(tokOp, i, i+2)
			}
		}
	}
	for k := 0; k < len(punct); k++ {
		if punct[k] == c {
			return l.emit(tokPunct, i, i+1)
		}
	}
	r, _ := utf8.DecodeRuneInString(s[i:])
	return lexer.Token{}, participle.Errorf(l.pos, "unexpected character %q", r)
}

// skipBad steps over what the last error was about, so that lexing can go
// on and later mistakes are reported too: the rest of the line after an
// unclosed string, one character otherwise. It reports false after an
// unclosed comment, which runs to the end of the file.
func (l *cfgLex) skipBad() bool {
	s := l.src
	i := l.pos.Offset
	if i >= len(s) {
		return false
	}
	switch c := s[i]; {
	case c == '"' || c == '\'':
		j := i
		for j < len(s) && s[j] != '\n' {
			j++
		}
		l.advance(j - i)
	case c == '/' && i+1 < len(s) && s[i+1] == '*':
		return false
	default:
		_, n := utf8.DecodeRuneInString(s[i:])
		l.advance(n)
	}
	return true
}
