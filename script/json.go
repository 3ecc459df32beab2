package script

import "encoding/json"

// Statements and expressions are interfaces, so a bare struct in JSON would not
// say which kind of node it is; each type adds a "type" tag. The alias types
// drop the methods so json.Marshal does not recurse.

func tagged(typ string, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	head := `{"type":` + quote(typ)
	if len(b) > 2 {
		head += ","
	}
	return append([]byte(head), b[1:]...), nil
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func (s *If) MarshalJSON() ([]byte, error)        { type a If; return tagged("if", (*a)(s)) }
func (s *Call) MarshalJSON() ([]byte, error)      { type a Call; return tagged("call", (*a)(s)) }
func (s *Assign) MarshalJSON() ([]byte, error)    { type a Assign; return tagged("assign", (*a)(s)) }
func (s *Exit) MarshalJSON() ([]byte, error)      { type a Exit; return tagged("exit", (*a)(s)) }
func (s *Drop) MarshalJSON() ([]byte, error)      { type a Drop; return tagged("drop", (*a)(s)) }
func (s *Return) MarshalJSON() ([]byte, error)    { type a Return; return tagged("return", (*a)(s)) }
func (s *RouteCall) MarshalJSON() ([]byte, error) { type a RouteCall; return tagged("route", (*a)(s)) }
func (e *Binary) MarshalJSON() ([]byte, error)    { type a Binary; return tagged("binary", (*a)(e)) }
func (e *Not) MarshalJSON() ([]byte, error)       { type a Not; return tagged("not", (*a)(e)) }
func (e *Literal) MarshalJSON() ([]byte, error)   { type a Literal; return tagged("literal", (*a)(e)) }
func (e *PseudoVar) MarshalJSON() ([]byte, error) { type a PseudoVar; return tagged("pvar", (*a)(e)) }
func (e *Myself) MarshalJSON() ([]byte, error)    { type a Myself; return tagged("myself", (*a)(e)) }
