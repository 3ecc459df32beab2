package loadgen

import (
	"embed"
	"fmt"
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
