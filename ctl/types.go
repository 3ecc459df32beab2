package ctl

import (
	"encoding/json"
	"time"
)

// Backend is what the control API needs from a running server. The
// supervisor implements it; every method is called from HTTP handlers, so
// each must be safe to call concurrently with the server's own work.
type Backend interface {
	// PS lists the worker groups with their workers, in the supervisor's
	// order (UDP groups by socket, then TCP, then timer).
	PS() []Group
	// Stats is a snapshot of the server's state and counters.
	Stats() Stats
	// Params is the registry of live settings; the same one on every call.
	Params() *Params
	// Suspend refuses new sessions until Resume, whatever the monitors say.
	Suspend() error
	// Resume ends a manual suspension; a suspension held by a monitor over
	// its high watermark lasts until the monitor allows.
	Resume() error
	// ResourceMonitor lists every monitor and limit with its thresholds.
	ResourceMonitor() []Resource
	// Reload re-reads the config file as SIGHUP does; an error leaves the old
	// config running. It says which settings changed and which lines take a
	// restart.
	Reload() (ReloadResult, error)
	// Locations lists the registrar's bindings: all of them, or those of
	// one address of record (normalised as the registrar does; a bare user
	// name matches that user in every domain). An error is a store out of
	// reach.
	Locations(aor string) ([]Binding, error)
	// RemoveLocation drops the binding of contact under the full AOR aor,
	// or all of the AOR's when contact is "", and says how many went;
	// ErrNoBinding when there was none.
	RemoveLocation(aor, contact string) (int, error)
	// Users lists the subscribers digest authentication knows.
	Users() ([]User, error)
	// AddUser adds or replaces a subscriber's credentials (HA1 hashes,
	// never the password).
	AddUser(u User) error
	// RemoveUser drops a subscriber; ErrNoUser when there was none.
	RemoveUser(name, realm string) error
	// Sockets lists every address the server serves, as bound (a port 0
	// in the config is the port the kernel gave): the SIP sockets in
	// config order, then the control address.
	Sockets() []Socket
	// Bans lists the sources banned for floods or password guessing, the
	// soonest to end first.
	Bans() []Ban
	// Unban lifts the ban of a source address; ErrNoBan when it had none,
	// another error for something that is no address.
	Unban(source string) error
}

// Ban is one source refused, as `ctl bans` shows it.
type Ban struct {
	Source string `json:"source"`
	// Reason is pike (requests per window) or auth (failed
	// authentications).
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
	Until  time.Time `json:"until"`
	// Count is what earned the ban: the requests in the window, or the
	// failed authentications.
	Count int `json:"count"`
	// User is the user the failed authentications named, for auth.
	User string `json:"user,omitempty"`
}

// Socket is one address the server serves, as `ctl sockets` shows it.
type Socket struct {
	// Proto is udp, tcp, tls, ws or wss for a SIP socket, http for the control
	// address (control API, metrics, health).
	Proto string `json:"proto"`
	// Address is IP:PORT as bound.
	Address string `json:"address"`
}

// User is a subscriber of digest authentication: a name in a realm, and
// the HA1 hashes of its password, H(name:realm:password), in lower-case
// hex; Users lists them without the hashes.
type User struct {
	Name      string `json:"user"`
	Realm     string `json:"realm"`
	HA1MD5    string `json:"ha1_md5,omitempty"`
	HA1SHA256 string `json:"ha1_sha256,omitempty"`
}

// Loads is a load in percent of wall time busy (0–100, OpenSIPS's meaning)
// over three views.
type Loads struct {
	Second     float64 `json:"1s"`
	Minute     float64 `json:"1m"`
	TenMinutes float64 `json:"10m"`
}

// Group is one worker group as `ctl ps` shows it.
type Group struct {
	Name string `json:"name"`
	// Kind is udp, tcp or timer.
	Kind string `json:"kind"`
	// Profile is the auto-scaling profile's name, "" for a fixed-size group.
	Profile string `json:"profile,omitempty"`
	// Load is the mean over the group's live, non-draining workers.
	Load    Loads    `json:"load"`
	Workers []Worker `json:"workers"`
	// Generation is set while two generations of supervisor overlap after
	// an upgrade: which one the group belongs to (the older one drains).
	Generation int `json:"generation,omitempty"`
}

// UpgradeResult answers POST /mi/upgrade: the new generation that serves.
type UpgradeResult struct {
	Upgraded   bool   `json:"upgraded"`
	Pid        int    `json:"pid"`
	Generation int    `json:"generation"`
	Version    string `json:"version"`
}

// Worker is one worker process.
type Worker struct {
	ID  int `json:"id"`
	Pid int `json:"pid"`
	// State is spawning, ready, draining or exited.
	State string `json:"state"`
	Load  Loads  `json:"load"`
	// Queue is the number of messages handed to it and not yet handled.
	Queue int `json:"queue"`
	// QueueWaitSeconds is how long the oldest of them has waited: what
	// max_queue_wait and queue_delay_admission weigh.
	QueueWaitSeconds float64 `json:"queue_wait_seconds"`
	// Sessions is the number of dialogs and registrations it holds.
	Sessions int `json:"sessions"`
	// HeapBytes is its Go heap in use (heap objects), 0 until it has
	// reported it.
	HeapBytes uint64 `json:"heap_bytes"`
	// GCCPUSeconds is the CPU time its garbage collector has taken, the Go
	// runtime's estimate.
	GCCPUSeconds float64 `json:"gc_cpu_seconds"`
	// CPUSeconds is the CPU time its Go runtime counts as busy, the
	// runtime's estimate, as GCCPUSeconds is.
	CPUSeconds float64 `json:"cpu_seconds"`
	// GCCPUPercent is the share of its CPU its garbage collector took over
	// the last 10 to 20 seconds; absent until it has used any CPU.
	GCCPUPercent *float64 `json:"gc_cpu_percent,omitempty"`
	// Age is the time since it was forked; in JSON, as age_seconds.
	Age     time.Duration `json:"-"`
	Handled uint64        `json:"handled"`
	Dropped uint64        `json:"dropped"`
}

// workerJSON carries Worker's fields with Age in seconds: scripts reading
// `ctl ps --json` should not have to know Go's nanosecond durations.
type workerJSON struct {
	workerFields
	AgeSeconds float64 `json:"age_seconds"`
}

type workerFields Worker

// MarshalJSON writes Age as age_seconds.
func (w Worker) MarshalJSON() ([]byte, error) {
	return json.Marshal(workerJSON{workerFields(w), w.Age.Seconds()})
}

// UnmarshalJSON reads Age from age_seconds.
func (w *Worker) UnmarshalJSON(b []byte) error {
	var j workerJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*w = Worker(j.workerFields)
	w.Age = time.Duration(j.AgeSeconds * float64(time.Second))
	return nil
}

// Stats is the server's state as `ctl stats` shows it. Durations are in
// seconds, shares in percent.
type Stats struct {
	UptimeSeconds float64 `json:"uptime_seconds"`

	// Suspended is true while new sessions are refused because of a monitor
	// over its high watermark or an operator's `ctl suspend`.
	Suspended bool `json:"suspended"`
	// SuspendedManually is true while an operator's suspension holds.
	SuspendedManually bool `json:"suspended_manually,omitempty"`
	// SuspendedSeconds is how long the current suspension has lasted.
	SuspendedSeconds float64 `json:"suspended_seconds,omitempty"`
	// SuspendReasons names each cause, such as
	// "system_memory_usage 86.2% >= 85%" or "suspended by the operator".
	SuspendReasons []string `json:"suspend_reasons,omitempty"`
	// Warning is the not-accepting-new-sessions message shown while
	// suspended, "" otherwise.
	Warning string `json:"warning,omitempty"`

	// Healthy is what /healthz answers; HealthReason says why not.
	Healthy      bool   `json:"healthy"`
	HealthReason string `json:"health_reason,omitempty"`

	// Throttle is the RTT load throttle of each group.
	Throttle []Throttle `json:"throttle,omitempty"`

	// Flips counts the status flips of each component within the flip
	// window; FlipThreshold flips within it make the server unhealthy.
	Flips             map[string]int `json:"flips,omitempty"`
	FlipThreshold     int            `json:"flip_threshold,omitempty"`
	FlipWindowSeconds float64        `json:"flip_window_seconds,omitempty"`

	// Counters holds the rest by name, such as sessions, calls,
	// registrations, refused_suspended, refused_limit, refused_queue.
	Counters map[string]float64 `json:"counters,omitempty"`
}

// Throttle is one group's RTT load throttle.
type Throttle struct {
	Group string `json:"group"`
	// Enabled is false when throttling is switched off for the group.
	Enabled bool `json:"enabled"`
	// SharePercent is the share of new sessions refused, 0 when not
	// throttling.
	SharePercent     float64 `json:"share_percent"`
	RTTSeconds       float64 `json:"rtt_seconds"`
	ThresholdSeconds float64 `json:"threshold_seconds"`
}

// Resource is one line of `ctl resource-monitor`: a monitor or a limit.
type Resource struct {
	// Name is a watermark monitor (system_memory_usage), a limit
	// (max_sessions, max_sessions/udp0) or a throttle reading
	// (throttle_rtt/udp0).
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	// High is the threshold that Value is measured against, 0 when there is
	// none (an unlimited limit); Low is the low watermark, 0 when the
	// resource has none.
	High float64 `json:"high"`
	Low  float64 `json:"low"`
	// Unit is "%", "s", or "" for a count.
	Unit string `json:"unit"`
	// Over is true while Value is over its threshold.
	Over bool `json:"over"`
}

// Binding is one registration: an address of record bound to a contact.
type Binding struct {
	AOR     string    `json:"aor"`
	Contact string    `json:"contact"`
	Expires time.Time `json:"expires"`
	// Source is the address the REGISTER came from.
	Source string `json:"source"`
}
