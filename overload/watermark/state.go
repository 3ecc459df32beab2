package watermark

import (
	"strings"
	"time"
)

// Transition is what an observation or an operator command changed.
type Transition string

// Transitions; None when the state stayed as it was.
const (
	None    Transition = ""
	Suspend Transition = "suspend"
	Resume  Transition = "resume"
)

// State is the suspension state of one server. The zero value is running. It is
// not safe for concurrent use: the supervisor's monitor loop owns it and
// publishes what it reports.
type State struct {
	// causes are the monitors holding the server suspended, each with the text
	// that recorded why (its value against its high watermark when it was met).
	causes map[Monitor]string
	manual bool
	since  time.Time
}

// Suspended reports whether new sessions are refused, for either reason.
func (s *State) Suspended() bool { return s.manual || len(s.causes) > 0 }

// Manual reports whether an operator suspended the server.
func (s *State) Manual() bool { return s.manual }

// Since is when the server was last suspended or resumed.
func (s *State) Since() time.Time { return s.since }

// Causes lists the monitors holding the server suspended, in report order.
func (s *State) Causes() []Monitor { return order(s.causes) }

// Observe applies one sample under the watermarks in force and reports the
// transition, if any, with its reason: for a suspension the monitors and values
// that met their high watermarks, like `system_memory_usage 86.2% >= 85%`; for a
// resumption those that came down, like `system_memory_usage 69.5% <= 70%`.
//
// A monitor that met its high watermark holds the server suspended until its
// value is at or below its low watermark: the seed resumes "when this Low
// trigger is met". A monitor with no value in the sample keeps its hold, since
// nothing shows it came down, and a monitor no longer in marks releases it.
func (s *State) Observe(values Sample, marks Watermarks, now time.Time) (Transition, string) {
	was := s.Suspended()
	var met, cleared []string
	for m := range s.causes {
		if _, ok := marks[m]; !ok {
			delete(s.causes, m)
			cleared = append(cleared, string(m)+" no longer watched")
		}
	}
	for _, m := range order(marks) {
		v, ok := values[m]
		if !ok {
			continue
		}
		p, pct := marks[m], m.IsPercent()
		_, held := s.causes[m]
		switch {
		case v >= p.High:
			why := string(m) + " " + formatValue(v, pct) + " >= " + format(p.High, pct)
			if !held {
				if s.causes == nil {
					s.causes = map[Monitor]string{}
				}
				s.causes[m] = why
			}
			met = append(met, why)
		case held && v <= p.Low:
			delete(s.causes, m)
			cleared = append(cleared, string(m)+" "+formatValue(v, pct)+" <= "+format(p.Low, pct))
		}
	}
	is := s.Suspended()
	switch {
	case !was && is:
		s.since = now
		return Suspend, strings.Join(met, ", ")
	case was && !is:
		s.since = now
		return Resume, strings.Join(cleared, ", ")
	}
	return None, ""
}

// SuspendManually suspends the server until ResumeManually, whatever the
// monitors say.
func (s *State) SuspendManually(now time.Time) Transition {
	was := s.Suspended()
	s.manual = true
	if was {
		return None
	}
	s.since = now
	return Suspend
}

// ResumeManually ends an operator's suspension. It does not override the
// monitors: a server still over a high watermark stays suspended, and the
// operator who disagrees changes the watermark instead.
func (s *State) ResumeManually(now time.Time) Transition {
	if !s.manual {
		return None
	}
	s.manual = false
	if s.Suspended() {
		return None
	}
	s.since = now
	return Resume
}

// Reason says why the server is suspended, "" when it is not: each monitor
// holding it as recorded when its high watermark was met, and the operator.
func (s *State) Reason() string {
	parts := s.usage()
	if s.manual {
		parts = append(parts, "suspended by the operator")
	}
	return strings.Join(parts, ", ")
}

// Warning is the operator-facing message while suspended, after the seed's,
// "" when running. It says what will end the suspension.
func (s *State) Warning() string {
	usage := strings.Join(s.usage(), ", ")
	switch {
	case s.manual && usage != "":
		return "server is suspended by the operator and due to high resource usage (" + usage +
			"). It will resume when the operator resumes it and resource usage allows."
	case s.manual:
		return "server is suspended by the operator. It will resume when the operator resumes it."
	case usage != "":
		return "server is suspended due to high resource usage (" + usage +
			"). It will resume automatically when resource usage allows."
	}
	return ""
}

func (s *State) usage() []string {
	var parts []string
	for _, m := range order(s.causes) {
		parts = append(parts, s.causes[m])
	}
	return parts
}
