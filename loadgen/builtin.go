package loadgen

import (
	"bytes"
	"embed"
	"fmt"
	"strconv"
)

//go:embed scenarios/*.xml
var builtinFS embed.FS

// BuiltinXML is built-in scenario name (-sd) as a SIPp XML scenario that
// sipload -sf and sipp -sf both run.
func BuiltinXML(name string) ([]byte, error) {
	b, err := builtinFS.ReadFile("scenarios/" + name + ".xml")
	if err != nil {
		return nil, fmt.Errorf("%w: no built-in scenario %q (want uac, uas, register or options)", ErrUsage, name)
	}
	return b, nil
}

// compileBuiltin compiles built-in scenario name (-sn) for the run o
// describes. The file is the one -sd prints, with the two values SIPp has
// no keyword for written in: the From user is the -au user when one is
// given (a proxy that authenticates callers checks that they match), and
// register's Expires and the uas's answer to a REGISTER say --expires.
func compileBuiltin(name string, o *Options) (*Scenario, error) {
	src, err := BuiltinXML(name)
	if err != nil {
		return nil, err
	}
	if o.AuthUser != "" && (name == "uac" || name == "options") {
		src = bytes.ReplaceAll(src, []byte("<sip:sipload@[local_ip]>;tag="), []byte("<sip:"+o.AuthUser+"@[local_ip]>;tag="))
	}
	if o.Expires > 0 {
		src = bytes.ReplaceAll(src, []byte("Expires: 3600"), []byte("Expires: "+strconv.Itoa(o.Expires)))
		src = bytes.ReplaceAll(src, []byte(";expires=3600"), []byte(";expires="+strconv.Itoa(o.Expires)))
	}
	sc, err := ParseScenario(name, src, nil)
	if err != nil {
		return nil, fmt.Errorf("built-in scenario %s: %w", name, err)
	}
	sc.builtin = true
	return sc, nil
}
