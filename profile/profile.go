// Package profile holds an auto-scaling profile, a group's load history and the
// scaling decision, as OpenSIPS 3.x defines them (the OpenSIPS 3.0 announcement, "Auto process
// scaling"): Decide forks a worker on sustained high load and drains one on
// sustained low load, never within a cooldown after startup or a fork, and
// never when the load expected on one worker fewer would reach the up
// threshold. History is the per-group ring Decide reads, and Views keeps the
// 1 s / 1 min / 10 min load means OpenSIPS reports. Nothing here does I/O or
// reads the clock: the supervisor's cycle loop samples, appends and asks
// Decide, then rescales the history after it forks or drains.
package profile

// Profile is one `auto_scaling_profile = NAME scale up to UpTo on UpLoad% for
// UpCycles cycles within Window [scale down to DownTo on DownLoad% for
// DownCycles cycles]` line, validated.
type Profile struct {
	// Name as written in the config; names compare case-insensitively.
	Name string `json:"name"`
	// UpTo is the most workers the group may have (1..999).
	UpTo int `json:"up_to"`
	// UpLoad is the load, in percent (1..100), that a cycle must exceed to count
	// towards a fork.
	UpLoad int `json:"up_load"`
	// UpCycles is how many of the last Window cycles must exceed UpLoad.
	UpCycles int `json:"up_cycles"`
	// Window is the monitoring window in cycles (defaults to UpCycles).
	Window int `json:"window"`
	// DownTo is the fewest workers the group keeps; 0 means it never scales down.
	DownTo int `json:"down_to"`
	// DownLoad is the load, in percent, that every one of the last DownCycles
	// cycles must stay under for a worker to be drained.
	DownLoad int `json:"down_load"`
	// DownCycles is the number of consecutive low cycles needed to scale down.
	DownCycles int `json:"down_cycles"`
	// Cooldown is the number of cycles after startup and after each fork during
	// which no worker is drained. 0 means OpenSIPS's default of 10 × DownCycles.
	Cooldown int `json:"cooldown,omitempty"`
}

// ScalesDown reports whether the profile has a scale-down part.
func (p Profile) ScalesDown() bool { return p.DownTo > 0 && p.DownCycles > 0 }

// CooldownCycles is the no-termination window after startup and after a fork.
func (p Profile) CooldownCycles() int {
	if p.Cooldown > 0 {
		return p.Cooldown
	}
	return 10 * p.DownCycles
}
