// Package e2e runs the real sipvisor binary, as a user would, against SIPp
// and sipload on 127.0.0.1: calls through the proxy over UDP and TCP,
// registrations, scaling under call load, overload protection.
package e2e
