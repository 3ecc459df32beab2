package dispatcher

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/sipvisor/sipvisor/overload/oc"
)

// Status is a destination's state as selection sees it.
type Status uint8

// The states. Only Active and Probing destinations are selected.
const (
	// Active: answering its probes (or not probed).
	Active Status = iota
	// Probing: its last probes failed, fewer than the threshold; still
	// selected (Kamailio's "trying").
	Probing
	// Inactive: as many probes failed in a row as the threshold, or taken
	// out by hand, or held after a 503 with Retry-After; skipped until it
	// answers again (or is set active by hand).
	Inactive
	// Disabled: flag 4 in the list; never selected, never probed.
	Disabled
	// Drain: taken out by hand for new calls; requests within dialogs
	// follow their Route headers to it as before.
	Drain
)

var statusNames = [...]string{"active", "probing", "inactive", "disabled", "drain"}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("status(%d)", int(s))
}

// Statuses lists every status, in order, for metrics that have a series
// for each.
func Statuses() []Status { return []Status{Active, Probing, Inactive, Disabled, Drain} }

// ParseStatus reads a status's name.
func ParseStatus(s string) (Status, error) {
	for i, n := range statusNames {
		if n == s {
			return Status(i), nil
		}
	}
	return 0, fmt.Errorf("no state %q; want active, inactive or drain", s)
}

// Usable reports whether selection may choose a destination in this state.
func (s Status) Usable() bool { return s == Active || s == Probing }

// Probe is how destinations are probed.
type Probe struct {
	// Interval between OPTIONS probes of a destination; 0 probes none.
	Interval time.Duration
	// Timeout after which an unanswered probe failed; 0 means Interval.
	Timeout time.Duration
	// FailThreshold is the probes failed in a row that make a destination
	// inactive (ds_probing_threshold).
	FailThreshold int
	// OKThreshold is the probes answered in a row that make an inactive
	// destination active again (ds_inactive_threshold).
	OKThreshold int
	// Alive says whether a reply's code counts as an answer
	// (ds_ping_reply_codes).
	Alive func(code int) bool
}

func (p *Probe) timeout() time.Duration {
	if p.Timeout > 0 {
		return p.Timeout
	}
	return p.Interval
}

// Health is what the supervisor knows of one destination. The zero value
// is an active destination never probed.
type Health struct {
	// Manual is the state set by hand (Inactive or Drain) or by the list
	// (Disabled); Active means none, and the probes decide.
	Manual Status
	// Down is the probes' verdict: FailThreshold failures in a row, until
	// OKThreshold answers in a row.
	Down      bool
	Fails     int // failed in a row
	OKs       int // answered in a row
	Probes    uint64
	Failures  uint64
	LastCode  int
	RTT       time.Duration // of the last answered probe
	HoldUntil time.Time     // held out of the rotation (Hold) until then
	// OC is the destination's RFC 7339 feedback, as the workers saw it in
	// its responses: the share of new sessions to shed, until when.
	OC oc.State

	pending bool
	sentAt  time.Time
	nextAt  time.Time
}

// NewHealth is a destination's state as the list starts it.
func NewHealth(d *Dest) Health {
	var h Health
	switch {
	case d.Flags&FlagDisabled != 0:
		h.Manual = Disabled
	case d.Flags&FlagInactive != 0:
		h.Down = true
	}
	return h
}

// Status is the destination's state at now.
func (h *Health) Status(now time.Time) Status {
	switch {
	case h.Manual != Active:
		return h.Manual
	case h.Down, now.Before(h.HoldUntil):
		return Inactive
	case h.Fails > 0:
		return Probing
	}
	return Active
}

// Hold takes the destination out of the rotation until then: what a 503
// with Retry-After asks (RFC 3261 21.5.4). It does not shorten a hold.
func (h *Health) Hold(until time.Time) {
	if until.After(h.HoldUntil) {
		h.HoldUntil = until
	}
}

// TakeOC applies RFC 7339 feedback a worker took from the destination's
// responses: only one newer (by oc-seq) than the feedback held; false when
// it was not.
func (h *Health) TakeOC(s oc.State) bool {
	if h.OC.Has && !s.Seq.After(h.OC.Seq) {
		return false
	}
	h.OC = s
	return true
}

// Tick runs the probe timers at now: a probe unanswered for the timeout
// fails, and it reports whether a probe is due now, which the caller then
// sends (and calls Sent).
func (h *Health) Tick(now time.Time, p *Probe) bool {
	if p.Interval <= 0 || h.Manual == Disabled {
		return false
	}
	if h.pending && now.Sub(h.sentAt) >= p.timeout() {
		h.pending = false
		h.failed(p)
	}
	return !h.pending && !now.Before(h.nextAt)
}

// Sent records a probe sent at now.
func (h *Health) Sent(now time.Time, p *Probe) {
	h.pending, h.sentAt, h.nextAt = true, now, now.Add(p.Interval)
	h.Probes++
}

// Answered records the reply to the pending probe, received at now; a
// reply when none is pending (late, after its timeout) is ignored.
func (h *Health) Answered(now time.Time, code int, p *Probe) {
	if !h.pending {
		return
	}
	h.pending = false
	h.LastCode = code
	if p.Alive != nil && !p.Alive(code) {
		h.failed(p)
		return
	}
	h.RTT = now.Sub(h.sentAt)
	h.Fails = 0
	h.OKs++
	if h.Down && h.OKs >= max(p.OKThreshold, 1) {
		h.Down = false
	}
}

// Failed records a probe that could not be sent, or a destination a
// script reported failed (ds_mark_dst): a failure like a probe's timeout.
func (h *Health) Failed(p *Probe) {
	h.pending = false
	h.failed(p)
}

func (h *Health) failed(p *Probe) {
	h.Failures++
	h.OKs = 0
	h.Fails++
	if h.Fails >= max(p.FailThreshold, 1) {
		h.Down = true
	}
}

// States is what the supervisor sends its workers: each destination's
// status by key (Dest.Key), and a generation that grows with each change.
type States struct {
	Gen    uint64            `json:"gen"`
	Status map[string]Status `json:"status"`
	// OC is the RFC 7339 feedback of the destinations that sent any.
	OC map[string]oc.State `json:"oc,omitempty"`
}

// EncodeStates writes States for a frame.
func EncodeStates(s States) []byte {
	b, _ := json.Marshal(s) // a map of strings to small numbers always encodes
	return b
}

// DecodeStates reads EncodeStates.
func DecodeStates(b []byte) (States, error) {
	var s States
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("destination states: %w", err)
	}
	return s, nil
}

// Report is what a worker tells the supervisor of the destinations, by
// key: the new sessions it sent each (Sent) and those it sent there after
// another failed (Failovers) since its last report, and the states a
// script set (ds_mark_dst: Inactive or Active).
type Report struct {
	Sent      map[string]uint64 `json:"sent,omitempty"`
	Failovers map[string]uint64 `json:"failovers,omitempty"`
	Mark      map[string]Status `json:"mark,omitempty"`
	// OC is the RFC 7339 feedback the worker took from each destination's
	// responses, Hold the time (unix ms) until which a 503 with
	// Retry-After and no oc holds one, and Shed the new sessions the
	// worker did not send one for its feedback.
	OC   map[string]oc.State `json:"oc,omitempty"`
	Hold map[string]int64    `json:"hold,omitempty"`
	Shed map[string]uint64   `json:"shed,omitempty"`
}

// EncodeReport writes a Report for a note.
func EncodeReport(r Report) []byte {
	b, _ := json.Marshal(r) // maps of strings to numbers always encode
	return b
}

// DecodeReport reads EncodeReport.
func DecodeReport(b []byte) (Report, error) {
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("destination report: %w", err)
	}
	return r, nil
}
