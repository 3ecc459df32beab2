// Package script holds the routing script of a config: the route, onreply_route,
// failure_route and timer_route blocks, as a plain tree that the routing engine
// walks. It holds no parser types, so workers and tests can build and read it
// without the config grammar; config/ fills it and checks it against Functions
// and PseudoVars.
//
// Every node carries its Pos so that run-time errors can point into the file as
// load-time errors do. The tree marshals to JSON with a "type" tag on each
// statement and expression, and the output is stable (maps sort by key), so it
// can live in golden files.
package script

import (
	"encoding/json"
	"fmt"
	"time"
)

// Pos is a place in a config file. Line and Col count from 1.
type Pos struct {
	File string
	Line int
	Col  int
}

// String gives the FILE:LINE:COL form used in every diagnostic.
func (p Pos) String() string { return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col) }

// MarshalJSON writes the position as one "FILE:LINE:COL" string: golden files
// stay short and a diff shows the moved node at a glance.
func (p Pos) MarshalJSON() ([]byte, error) { return json.Marshal(p.String()) }

// Script is the routing logic of one config.
type Script struct {
	// Routes holds route blocks by name; the main `route { }` has key "".
	Routes map[string]*Block `json:"routes"`
	// OnReply holds onreply_route[name] blocks, OnFailure failure_route[name]
	// blocks; an unnamed onreply_route has key "".
	OnReply   map[string]*Block `json:"onreply,omitempty"`
	OnFailure map[string]*Block `json:"onfailure,omitempty"`
	// Timers holds timer_route[name, SECONDS] blocks in file order.
	Timers []Timer `json:"timers,omitempty"`
}

// Timer is one timer_route block, run every Interval on a timer worker.
type Timer struct {
	Name     string        `json:"name"`
	Interval time.Duration `json:"interval"`
	Body     *Block        `json:"body"`
}

// Block is a braced list of statements.
type Block struct {
	Pos   Pos    `json:"pos"`
	Stmts []Stmt `json:"stmts"`
}

// Stmt is one statement: *If, *Call, *Assign, *Exit, *Drop, *Return or
// *RouteCall.
type Stmt interface {
	StmtPos() Pos
}

// Expr is an expression: *Binary, *Not, *Literal, *PseudoVar, *Call or *Myself.
type Expr interface {
	ExprPos() Pos
}

// If runs Then when Cond holds, else Else (nil when there is no else part).
// An `else if` is an Else block holding one *If.
type If struct {
	Pos  Pos    `json:"pos"`
	Cond Expr   `json:"cond"`
	Then *Block `json:"then"`
	Else *Block `json:"else,omitempty"`
}

// Call calls a function of Functions. As a condition it is true when the
// function succeeds (OpenSIPS: a positive return code).
type Call struct {
	Pos  Pos        `json:"pos"`
	Name string     `json:"name"`
	Args []*Literal `json:"args"`
}

// Assign sets a writable pseudo-variable.
type Assign struct {
	Pos   Pos        `json:"pos"`
	Left  *PseudoVar `json:"left"`
	Right Expr       `json:"right"`
}

// Exit stops the script; the message is not processed further.
type Exit struct {
	Pos Pos `json:"pos"`
}

// Drop stops the script and discards the message (or reply).
type Drop struct {
	Pos Pos `json:"pos"`
}

// Return leaves the current route. HasCode tells `return(0)` from `return`,
// which OpenSIPS treats as return(1).
type Return struct {
	Pos     Pos  `json:"pos"`
	Code    int  `json:"code"`
	HasCode bool `json:"has_code,omitempty"`
}

// RouteCall runs route[Name] and continues after it returns.
type RouteCall struct {
	Pos  Pos    `json:"pos"`
	Name string `json:"name"`
}

// Binary is Left Op Right, with Op one of == != =~ !~ < > <= >= && ||.
type Binary struct {
	Pos   Pos    `json:"pos"`
	Op    string `json:"op"`
	Left  Expr   `json:"left"`
	Right Expr   `json:"right"`
}

// Not is !X.
type Not struct {
	Pos Pos  `json:"pos"`
	X   Expr `json:"x"`
}

// Literal is a string or an integer; IsInt says which field holds it.
type Literal struct {
	Pos   Pos    `json:"pos"`
	IsInt bool   `json:"is_int,omitempty"`
	Int   int64  `json:"int,omitempty"`
	Str   string `json:"str,omitempty"`
}

// PseudoVar is $name or $name(arg), such as $ru or $hdr(Via). Name excludes
// the dollar sign.
type PseudoVar struct {
	Pos  Pos    `json:"pos"`
	Name string `json:"name"`
	Arg  string `json:"arg,omitempty"`
}

// Myself is the keyword in `$ru == myself`: true when the other side is a URI
// or host this server answers for.
type Myself struct {
	Pos Pos `json:"pos"`
}

func (s *If) StmtPos() Pos        { return s.Pos }
func (s *Call) StmtPos() Pos      { return s.Pos }
func (s *Assign) StmtPos() Pos    { return s.Pos }
func (s *Exit) StmtPos() Pos      { return s.Pos }
func (s *Drop) StmtPos() Pos      { return s.Pos }
func (s *Return) StmtPos() Pos    { return s.Pos }
func (s *RouteCall) StmtPos() Pos { return s.Pos }

func (e *Binary) ExprPos() Pos    { return e.Pos }
func (e *Not) ExprPos() Pos       { return e.Pos }
func (e *Literal) ExprPos() Pos   { return e.Pos }
func (e *PseudoVar) ExprPos() Pos { return e.Pos }
func (e *Call) ExprPos() Pos      { return e.Pos }
func (e *Myself) ExprPos() Pos    { return e.Pos }

// String writes the variable as it is spelt in a script.
func (v *PseudoVar) String() string {
	if v.Arg != "" {
		return "$" + v.Name + "(" + v.Arg + ")"
	}
	return "$" + v.Name
}
