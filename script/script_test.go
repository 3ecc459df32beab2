package script

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestFunctionsTable(t *testing.T) {
	t.Parallel()
	for name, f := range Functions {
		if f.MinArgs < 0 || f.MaxArgs < f.MinArgs {
			t.Errorf("%s: want 0 <= MinArgs <= MaxArgs, have %d..%d", name, f.MinArgs, f.MaxArgs)
		}
		if !strings.HasPrefix(f.Doc, name+"(") && !strings.HasPrefix(f.Doc, name+" ") {
			t.Errorf("%s: want the doc to start with the call, have %q", name, f.Doc)
		}
	}
	for _, tc := range []struct {
		name     string
		min, max int
	}{
		{"sl_send_reply", 2, 2}, {"t_relay", 0, 1}, {"xlog", 1, 2}, {"cpu_burn", 1, 1}, {"has_totag", 0, 0},
	} {
		f, ok := Functions[tc.name]
		if !ok || f.MinArgs != tc.min || f.MaxArgs != tc.max {
			t.Errorf("%s: want %d..%d, have %+v (present %v)", tc.name, tc.min, tc.max, f, ok)
		}
	}
}

// TestJSON pins the tagged, stable JSON form that golden files rely on.
func TestJSON(t *testing.T) {
	t.Parallel()
	p := Pos{File: "a.cfg", Line: 2, Col: 3}
	s := &Script{Routes: map[string]*Block{
		"": {Pos: p, Stmts: []Stmt{
			&If{Pos: p, Cond: &Not{Pos: p, X: &Call{Pos: p, Name: "t_relay", Args: []*Literal{}}},
				Then: &Block{Pos: p, Stmts: []Stmt{&Exit{Pos: p}}}},
			&Assign{Pos: p, Left: &PseudoVar{Pos: p, Name: "var", Arg: "x"}, Right: &Binary{Pos: p, Op: "==", Left: &Myself{Pos: p}, Right: &Literal{Pos: p, IsInt: true, Int: 5}}},
			&Return{Pos: p}, &Drop{Pos: p}, &RouteCall{Pos: p, Name: "b"},
		}},
		"b": {Pos: p, Stmts: []Stmt{}},
	}}
	have, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"routes":{"":{"pos":"a.cfg:2:3","stmts":[` +
		`{"type":"if","pos":"a.cfg:2:3","cond":{"type":"not","pos":"a.cfg:2:3","x":{"type":"call","pos":"a.cfg:2:3","name":"t_relay","args":[]}},"then":{"pos":"a.cfg:2:3","stmts":[{"type":"exit","pos":"a.cfg:2:3"}]}},` +
		`{"type":"assign","pos":"a.cfg:2:3","left":{"type":"pvar","pos":"a.cfg:2:3","name":"var","arg":"x"},"right":{"type":"binary","pos":"a.cfg:2:3","op":"==","left":{"type":"myself","pos":"a.cfg:2:3"},"right":{"type":"literal","pos":"a.cfg:2:3","is_int":true,"int":5}}},` +
		`{"type":"return","pos":"a.cfg:2:3","code":0},{"type":"drop","pos":"a.cfg:2:3"},{"type":"route","pos":"a.cfg:2:3","name":"b"}]},` +
		`"b":{"pos":"a.cfg:2:3","stmts":[]}}}`
	if string(have) != want {
		t.Errorf("want %s\nhave %s", want, have)
	}
}

func TestPseudoVarString(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v    PseudoVar
		want string
	}{
		{PseudoVar{Name: "ru"}, "$ru"},
		{PseudoVar{Name: "hdr", Arg: "Via"}, "$hdr(Via)"},
	} {
		if have := tc.v.String(); have != tc.want {
			t.Errorf("want %v, have %v", tc.want, have)
		}
	}
}
