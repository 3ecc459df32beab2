package ctl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
)

// Destination is one destination of a destination set (ds_list_file) as
// the supervisor knows it.
type Destination struct {
	Set      int    `json:"set"`
	URI      string `json:"uri"`
	Flags    int    `json:"flags"`
	Priority int    `json:"priority"`
	Weight   int    `json:"weight"`
	Attrs    string `json:"attrs,omitempty"`
	// State is active, probing (failing probes, still selected), inactive,
	// disabled or drain.
	State string `json:"state"`
	// Probed is false for a destination not probed (ds_ping_interval 0,
	// disabled, or reached over TLS).
	Probed        bool    `json:"probed"`
	RTTSeconds    float64 `json:"rtt_seconds"`
	Probes        uint64  `json:"probes"`
	ProbeFailures uint64  `json:"probe_failures"`
	LastCode      int     `json:"last_code,omitempty"`
	// Sent counts the new requests the workers sent it, Failovers those
	// of them sent after another destination failed; CallsPerSecond is
	// the rate of Sent over the last few seconds: its load from here.
	Sent           uint64  `json:"sent"`
	Failovers      uint64  `json:"failovers"`
	CallsPerSecond float64 `json:"calls_per_second"`
	// LossPercent is the share of new sessions shed before sending, as the
	// destination's RFC 7339 feedback asks now (0 without any, or once
	// it expired); Shed counts the sessions shed so far (sent to another
	// destination, or answered 503).
	LossPercent int    `json:"loss_percent"`
	Shed        uint64 `json:"shed"`
}

// DestinationChange is the body of POST /mi/ds/set.
type DestinationChange struct {
	Set   int    `json:"set"`
	URI   string `json:"uri"`
	State string `json:"state"`
}

// DispatcherBackend is a Backend with destination sets: /mi/ds answers
// only when the Backend is one.
type DispatcherBackend interface {
	// Destinations lists every destination of every set, in list order.
	Destinations() []Destination
	// SetDestination sets a destination's state by hand: inactive or
	// drain (no new requests; those of dialogs in progress go on) until
	// active gives it back to its probes.
	SetDestination(set int, uri, state string) error
}

func (h *handler) ds(w http.ResponseWriter, r *http.Request, rest string) {
	db, ok := h.b.(DispatcherBackend)
	if !ok {
		writeError(w, http.StatusNotFound, "this server has no destination sets")
		return
	}
	switch rest {
	case "", "list":
		if h.method(w, r, http.MethodGet) {
			writeJSON(w, http.StatusOK, nonNil(db.Destinations()))
		}
	case "set":
		if !h.method(w, r, http.MethodPost) {
			return
		}
		var c DestinationChange
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&c); err != nil {
			writeError(w, http.StatusBadRequest, "ds set: want {\"set\": N, \"uri\": \"sip:...\", \"state\": \"active|inactive|drain\"}: "+err.Error())
			return
		}
		if err := db.SetDestination(c.Set, c.URI, c.State); err != nil {
			writeError(w, http.StatusBadRequest, "ds set: "+err.Error())
			return
		}
		writeJSON(w, http.StatusOK, nonNil(db.Destinations()))
	default:
		writeError(w, http.StatusNotFound, fmt.Sprintf("no endpoint /mi/ds/%s: want /mi/ds/list or /mi/ds/set", rest))
	}
}

func (cmd *command) ds(ctx context.Context, args []string) error {
	usage := usageError{"ds: want ds list or ds set SETID URI active|inactive|drain"}
	var ds []Destination
	show := func() error { return writeDestinations(cmd.stdout, ds) }
	switch {
	case len(args) == 1 && args[0] == "list":
		return cmd.call(ctx, http.MethodGet, "ds/list", nil, &ds, show)
	case len(args) == 4 && args[0] == "set":
		set, err := strconv.Atoi(args[1])
		if err != nil {
			return usageError{fmt.Sprintf("ds set: set id %q: want a whole number", args[1])}
		}
		body, _ := json.Marshal(DestinationChange{Set: set, URI: args[2], State: args[3]})
		return cmd.call(ctx, http.MethodPost, "ds/set", body, &ds, show)
	}
	return usage
}

func writeDestinations(w io.Writer, ds []Destination) error {
	t := table(w)
	fmt.Fprintln(t, "SET\tURI\tSTATE\tRTT\tPROBES\tFAILED\tSENT\tFAILOVERS\tCALLS/S\tLOSS\tSHED\tWEIGHT\tPRIORITY")
	for _, d := range ds {
		rtt := "-"
		if d.Probed && d.RTTSeconds > 0 {
			rtt = strconv.FormatFloat(d.RTTSeconds*1000, 'f', 1, 64) + "ms"
		}
		fmt.Fprintf(t, "%d\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%.1f\t%d%%\t%d\t%d\t%d\n", d.Set, d.URI, d.State, rtt,
			d.Probes, d.ProbeFailures, d.Sent, d.Failovers, d.CallsPerSecond, d.LossPercent, d.Shed, d.Weight, d.Priority)
	}
	return t.Flush()
}
