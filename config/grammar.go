package config

import (
	"github.com/alecthomas/participle/v2"
	"github.com/alecthomas/participle/v2/lexer"
)

// The grammar mirrors the file closely and stays permissive where a later check
// can say more than "unexpected token": global values are single tokens whose
// meaning depends on the setting, profile numbers keep their text (70%), and
// bare words in expressions are sorted out in load.go. Newlines carry no
// meaning, which is what lets a profile spread over several lines. The tokens
// come from lexer.go.

// itemParser reads one top-level item; parse.go cuts the file into items
// first, so that a mistake in one does not hide the others.
var itemParser = participle.MustBuild[itemAST](
	participle.Lexer(cfgLexer),
)

// The parsers of one kind of item, for an item whose first word says its
// kind: the grammar's error is then about that kind, not about whichever
// alternative went furthest.
var (
	blockParser   = participle.MustBuild[blockAST](participle.Lexer(cfgLexer))
	profileParser = participle.MustBuild[profileAST](participle.Lexer(cfgLexer))
	includeParser = participle.MustBuild[includeAST](participle.Lexer(cfgLexer))
)

type itemAST struct {
	Include *includeAST `parser:"  @@"`
	Profile *profileAST `parser:"| @@"`
	Block   *blockAST   `parser:"| @@"`
	Global  *globalAST  `parser:"| @@"`
}

// tok is one token kept with its position, for values checked after parsing.
type tok struct {
	Pos lexer.Position
	Val string `parser:"@(String | Number | Addr | Ident)"`
}

type numTok struct {
	Pos lexer.Position
	Val string `parser:"@Number"`
}

type strTok struct {
	Pos lexer.Position
	Val string `parser:"@String"`
}

type includeAST struct {
	Pos  lexer.Position
	Path *strTok `parser:"'include_file' '='? @@"`
}

type profileAST struct {
	Pos  lexer.Position
	Name *tok          `parser:"'auto_scaling_profile' '=' @@"`
	Up   *scaleUpAST   `parser:"@@"`
	Down *scaleDownAST `parser:"@@?"`
}

type scaleUpAST struct {
	Pos    lexer.Position
	Max    *numTok `parser:"'scale' 'up' 'to' @@"`
	Load   *numTok `parser:"'on' @@"`
	Cycles *numTok `parser:"'for' @@ ('cycles' | 'cycle')"`
	Window *numTok `parser:"('within' @@)?"`
}

type scaleDownAST struct {
	Pos    lexer.Position
	Min    *numTok `parser:"'scale' 'down' 'to' @@"`
	Load   *numTok `parser:"'on' @@"`
	Cycles *numTok `parser:"'for' @@ ('cycles' | 'cycle')"`
}

type globalAST struct {
	Pos   lexer.Position
	Name  *tok      `parser:"@@ '='"`
	Value *tok      `parser:"@@"`
	Mods  []*modAST `parser:"@@*"`
}

type modAST struct {
	Pos lexer.Position
	Key string `parser:"@('use_workers' | 'use_auto_scaling_profile')"`
	Arg *tok   `parser:"@@"`
}

type blockAST struct {
	Pos      lexer.Position
	Kind     string     `parser:"@('route' | 'onreply_route' | 'failure_route' | 'timer_route')"`
	Name     *tok       `parser:"('[' @@"`
	Interval *numTok    `parser:"(',' @@)? ']')?"`
	Body     *bodyBlock `parser:"@@"`
}

type bodyBlock struct {
	Pos   lexer.Position
	Stmts []*stmtAST `parser:"'{' @@* '}'"`
}

type stmtAST struct {
	If     *ifAST        `parser:"  @@"`
	Route  *routeCallAST `parser:"| @@"`
	Exit   *kwAST        `parser:"| @@"`
	Return *returnAST    `parser:"| @@"`
	Assign *assignAST    `parser:"| @@"`
	Call   *callAST      `parser:"| @@ ';'"`
	Block  *bodyBlock    `parser:"| @@"`
	Empty  bool          `parser:"| @';'"`
}

type ifAST struct {
	Pos  lexer.Position
	Cond *orExpr  `parser:"'if' '(' @@ ')'"`
	Then *stmtAST `parser:"@@"`
	Else *stmtAST `parser:"('else' @@)?"`
}

type routeCallAST struct {
	Pos  lexer.Position
	Name *tok `parser:"'route' '(' @@ ')' ';'"`
}

type kwAST struct {
	Pos lexer.Position
	Kw  string `parser:"@('exit' | 'drop') ';'"`
}

type returnAST struct {
	Pos   lexer.Position
	Kw    string  `parser:"@'return'"`
	Code  *numTok `parser:"( '(' @@ ')'"`
	Code2 *numTok `parser:"| @@ )? ';'"`
}

type assignAST struct {
	Pos   lexer.Position
	Left  *pvTok  `parser:"@@ ('=' | ':=')"`
	Right *orExpr `parser:"@@ ';'"`
}

type pvTok struct {
	Pos lexer.Position
	Val string `parser:"@PV"`
}

type callAST struct {
	Pos  lexer.Position
	Name string    `parser:"@Ident '('"`
	Args []*argAST `parser:"(@@ (',' @@)*)? ')'"`
}

type argAST struct {
	Pos lexer.Position
	Str *string `parser:"  @String"`
	Num *string `parser:"| @Number"`
	// Bare words and variables are accepted here only to be refused in
	// load.go with a message that says to quote them.
	Word *string `parser:"| @(Ident | PV | Addr)"`
}

type orExpr struct {
	Pos   lexer.Position
	Left  *andExpr   `parser:"@@"`
	Right []*andExpr `parser:"('||' @@)*"`
}

type andExpr struct {
	Pos   lexer.Position
	Left  *cmpExpr   `parser:"@@"`
	Right []*cmpExpr `parser:"('&&' @@)*"`
}

type cmpExpr struct {
	Pos   lexer.Position
	Left  *unaryExpr `parser:"@@"`
	Op    string     `parser:"(@('==' | '!=' | '=~' | '!~' | '<=' | '>=' | '<' | '>')"`
	Right *unaryExpr `parser:"@@)?"`
}

type unaryExpr struct {
	Pos  lexer.Position
	Not  *unaryExpr `parser:"  '!' @@"`
	Prim *primary   `parser:"| @@"`
}

type primary struct {
	Pos  lexer.Position
	Sub  *orExpr  `parser:"  '(' @@ ')'"`
	PV   *string  `parser:"| @PV"`
	Str  *string  `parser:"| @String"`
	Num  *string  `parser:"| @Number"`
	Call *callAST `parser:"| @@"`
	Word *string  `parser:"| @Ident"`
}
