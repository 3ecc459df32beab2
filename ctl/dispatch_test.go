package ctl

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

// dsBackend is testBackend with destination sets, refusing what the
// supervisor refuses.
type dsBackend struct {
	*testBackend
	dests []Destination
}

func (b *dsBackend) Destinations() []Destination { return b.dests }

func (b *dsBackend) SetDestination(set int, uri, state string) error {
	if state != "active" && state != "inactive" && state != "drain" {
		return errors.New("state \"" + state + "\": want active, inactive or drain")
	}
	for i := range b.dests {
		if b.dests[i].Set == set && b.dests[i].URI == uri {
			b.dests[i].State = state
			return nil
		}
	}
	return errors.New("no destination " + uri)
}

func newDSBackend() *dsBackend {
	return &dsBackend{testBackend: newTestBackend(), dests: []Destination{
		{Set: 1, URI: "sip:10.0.0.11:5060", Weight: 3, State: "active", Probed: true, RTTSeconds: 0.0004, Probes: 72, Sent: 261, Failovers: 15, CallsPerSecond: 9.3, LossPercent: 20, Shed: 52},
		{Set: 1, URI: "sip:10.0.0.12:5060", Weight: 1, State: "inactive", Probed: true, RTTSeconds: 0.0005, Probes: 72, ProbeFailures: 66, Sent: 35},
	}}
}

func TestDispatchCommands(t *testing.T) {
	b := newDSBackend()
	srv := serve(t, b, "")
	code, out, errs := ctl(t, srv.URL, "ds", "list")
	if code != 0 || errs != "" {
		t.Fatalf("ds list: exit %d: %s", code, errs)
	}
	golden(t, "ds_list", out)

	code, out, errs = ctl(t, srv.URL, "ds", "set", "1", "sip:10.0.0.12:5060", "drain")
	if code != 0 || !strings.Contains(out, "drain") {
		t.Fatalf("ds set drain: exit %d: %s %s", code, out, errs)
	}
	for _, bad := range [][]string{
		{"ds", "set", "1", "sip:10.0.0.12:5060", "gone"},
		{"ds", "set", "1", "sip:10.9.9.9", "drain"},
		{"ds", "set", "one", "sip:10.0.0.12:5060", "drain"},
		{"ds", "sets"},
	} {
		if code, _, errs := ctl(t, srv.URL, bad...); code == 0 || errs == "" {
			t.Errorf("%v: want an error, have exit %d", bad, code)
		}
	}
	if a := request(t, srv, http.MethodGet, "/mi/ds/set", "", nil); a.status != http.StatusMethodNotAllowed {
		t.Errorf("GET /mi/ds/set: %d", a.status)
	}
	if a := request(t, srv, http.MethodPost, "/mi/ds/set", "{", nil); a.status != http.StatusBadRequest {
		t.Errorf("a broken body: %d", a.status)
	}
	// A server without destination sets says so.
	plain := serve(t, newTestBackend(), "")
	if a := request(t, plain, http.MethodGet, "/mi/ds/list", "", nil); a.status != http.StatusNotFound || !strings.Contains(a.body, "no destination sets") {
		t.Errorf("without destination sets: %d %s", a.status, a.body)
	}
}
