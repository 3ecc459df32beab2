package script

import "sort"

// PVSpec describes a pseudo-variable: whether the script may assign it and
// whether it takes an argument in parentheses ($hdr(Name), $var(x)).
type PVSpec struct {
	Writable bool
	HasArg   bool
	Doc      string
}

// PseudoVars lists every pseudo-variable a script may use, by name without
// the dollar sign.
var PseudoVars = map[string]PVSpec{
	"rm":  {false, false, "request method"},
	"ru":  {true, false, "request URI"},
	"rU":  {true, false, "user part of the request URI"},
	"rd":  {false, false, "host part of the request URI"},
	"rp":  {false, false, "port of the request URI"},
	"du":  {true, false, "destination URI, where t_relay sends the request; empty when unset"},
	"si":  {false, false, "source IP of the message"},
	"sp":  {false, false, "source port of the message"},
	"pr":  {false, false, "transport the message came over: udp, tcp, tls, ws or wss"},
	"fu":  {false, false, "From URI"},
	"fU":  {false, false, "user part of the From URI"},
	"fd":  {false, false, "host part of the From URI"},
	"tu":  {false, false, "To URI"},
	"tU":  {false, false, "user part of the To URI"},
	"td":  {false, false, "host part of the To URI"},
	"ci":  {false, false, "Call-ID"},
	"ua":  {false, false, "User-Agent header"},
	"ct":  {false, false, "Contact header"},
	"rs":  {false, false, "reply status code (in onreply_route and failure_route)"},
	"rr":  {false, false, "reply reason phrase"},
	"hdr": {false, true, "value of the first header of that name, e.g. $hdr(Via)"},
	"var": {true, true, "script variable, local to the processing of one message"},
}

// PseudoVarNames returns the names of PseudoVars in sorted order.
func PseudoVarNames() []string {
	names := make([]string, 0, len(PseudoVars))
	for n := range PseudoVars {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
