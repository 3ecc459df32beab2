package watermark

import (
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)

// step is one event in a suspension story: an observation (values set), or an
// operator's suspend or resume.
type step struct {
	values  Sample
	op      string // "", "suspend", "resume"
	marks   Watermarks
	want    Transition
	reason  string
	waiting bool // suspended after the step
}

func mem(v float64) Sample { return Sample{SystemMemoryUsage: v} }

func TestObserve(t *testing.T) {
	t.Parallel()
	seed := Defaults() // system memory 85/70
	three := Watermarks{
		SystemMemoryUsage: {High: 85, Low: 70},
		NumberOfSessions:  {High: 10000, Low: 8000},
		EventQueueUsage:   {High: 90, Low: 50},
	}
	for _, tc := range []struct {
		name  string
		marks Watermarks
		steps []step
	}{
		{
			name:  "seed example: suspend at 85%, resume at 70%",
			marks: seed,
			steps: []step{
				{values: mem(50)},
				{values: mem(84.9)},
				{values: mem(85), want: Suspend, reason: "system_memory_usage 85.0% >= 85%", waiting: true},
				{values: mem(86.2), waiting: true},
				{values: mem(75), waiting: true},   // between the lines: stays suspended
				{values: mem(70.1), waiting: true}, // not yet down to the low watermark
				{values: mem(70), want: Resume, reason: "system_memory_usage 70.0% <= 70%"},
				{values: mem(80)}, // between the lines on the way up: stays running
				{values: mem(84.99)},
				{values: mem(86.2), want: Suspend, reason: "system_memory_usage 86.2% >= 85%", waiting: true},
				{values: mem(12.5), want: Resume, reason: "system_memory_usage 12.5% <= 70%"},
			},
		},
		{
			name:  "sessions are a count",
			marks: three,
			steps: []step{
				{values: Sample{NumberOfSessions: 9999, SystemMemoryUsage: 60}},
				{values: Sample{NumberOfSessions: 10000, SystemMemoryUsage: 60}, want: Suspend, reason: "number_of_sessions 10000 >= 10000", waiting: true},
				{values: Sample{NumberOfSessions: 7999, SystemMemoryUsage: 60}, want: Resume, reason: "number_of_sessions 7999 <= 8000"},
			},
		},
		{
			name:  "every monitor that caused it must come down",
			marks: three,
			steps: []step{
				{values: Sample{NumberOfSessions: 12000, SystemMemoryUsage: 60}, want: Suspend, reason: "number_of_sessions 12000 >= 10000", waiting: true},
				{values: Sample{NumberOfSessions: 11000, SystemMemoryUsage: 88}, waiting: true}, // memory joins the causes
				{values: Sample{NumberOfSessions: 5000, SystemMemoryUsage: 80}, waiting: true},  // sessions down, memory held
				{values: Sample{NumberOfSessions: 9000, SystemMemoryUsage: 69}, want: Resume, reason: "system_memory_usage 69.0% <= 70%"},
			},
		},
		{
			name:  "several highs met at once, in report order",
			marks: three,
			steps: []step{
				{values: Sample{SystemMemoryUsage: 90, EventQueueUsage: 95, NumberOfSessions: 1}, want: Suspend,
					reason: "event_queue_usage 95.0% >= 90%, system_memory_usage 90.0% >= 85%", waiting: true},
				{values: Sample{SystemMemoryUsage: 10, EventQueueUsage: 10, NumberOfSessions: 1}, want: Resume,
					reason: "event_queue_usage 10.0% <= 50%, system_memory_usage 10.0% <= 70%"},
			},
		},
		{
			name:  "a monitor below its low watermark that never held does not matter",
			marks: three,
			steps: []step{
				{values: Sample{SystemMemoryUsage: 90, EventQueueUsage: 10}, want: Suspend, reason: "system_memory_usage 90.0% >= 85%", waiting: true},
				{values: Sample{SystemMemoryUsage: 80, EventQueueUsage: 10}, waiting: true},
			},
		},
		{
			name:  "a missing reading keeps the hold",
			marks: seed,
			steps: []step{
				{values: mem(90), want: Suspend, reason: "system_memory_usage 90.0% >= 85%", waiting: true},
				{values: Sample{}, waiting: true},
				{values: nil, waiting: true},
				{values: mem(1), want: Resume, reason: "system_memory_usage 1.0% <= 70%"},
			},
		},
		{
			name:  "a missing reading never suspends",
			marks: seed,
			steps: []step{{values: Sample{HeapUsage: 99}}},
		},
		{
			name:  "watermarks changed at run time",
			marks: seed,
			steps: []step{
				{values: mem(86), want: Suspend, reason: "system_memory_usage 86.0% >= 85%", waiting: true},
				// The seed's example raises the pair to 90/85: 86% is now between them.
				{values: mem(86), marks: Watermarks{SystemMemoryUsage: {High: 90, Low: 85}}, waiting: true},
				{values: mem(85), marks: Watermarks{SystemMemoryUsage: {High: 90, Low: 85}}, want: Resume, reason: "system_memory_usage 85.0% <= 85%"},
				{values: mem(88), marks: Watermarks{SystemMemoryUsage: {High: 90, Low: 85}}},
			},
		},
		{
			name:  "a monitor no longer watched releases its hold",
			marks: seed,
			steps: []step{
				{values: mem(90), want: Suspend, reason: "system_memory_usage 90.0% >= 85%", waiting: true},
				{values: mem(90), marks: Watermarks{}, want: Resume, reason: "system_memory_usage no longer watched"},
			},
		},
		{
			name:  "manual suspend holds until manual resume",
			marks: seed,
			steps: []step{
				{op: "suspend", want: Suspend, waiting: true},
				{values: mem(10), waiting: true},
				{op: "suspend", waiting: true},
				{op: "resume", want: Resume},
				{op: "resume"},
			},
		},
		{
			name:  "manual resume does not override the monitors",
			marks: seed,
			steps: []step{
				{op: "suspend", want: Suspend, waiting: true},
				{values: mem(90), waiting: true},
				{op: "resume", waiting: true},
				{values: mem(80), waiting: true},
				{values: mem(60), want: Resume, reason: "system_memory_usage 60.0% <= 70%"},
			},
		},
		{
			name:  "manual suspend while already suspended",
			marks: seed,
			steps: []step{
				{values: mem(90), want: Suspend, reason: "system_memory_usage 90.0% >= 85%", waiting: true},
				{op: "suspend", waiting: true},
				{values: mem(10), waiting: true},
				{op: "resume", want: Resume},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s State
			marks := tc.marks
			for i, st := range tc.steps {
				now := t0.Add(time.Duration(i) * time.Second)
				if st.marks != nil {
					marks = st.marks
				}
				var tr Transition
				var reason string
				switch st.op {
				case "suspend":
					tr = s.SuspendManually(now)
				case "resume":
					tr = s.ResumeManually(now)
				default:
					tr, reason = s.Observe(st.values, marks, now)
				}
				if tr != st.want || reason != st.reason {
					t.Errorf("step %d %v: want %q %q, have %q %q", i, st.values, st.want, st.reason, tr, reason)
				}
				if s.Suspended() != st.waiting {
					t.Errorf("step %d %v: suspended: want %v, have %v", i, st.values, st.waiting, s.Suspended())
				}
				if tr != None && !s.Since().Equal(now) {
					t.Errorf("step %d: since: want %v, have %v", i, now, s.Since())
				}
			}
		})
	}
}

func TestWarning(t *testing.T) {
	t.Parallel()
	var s State
	if have := s.Warning(); have != "" {
		t.Errorf("running: want no warning, have %q", have)
	}
	s.Observe(mem(86.2), Defaults(), t0)
	want := "server is suspended due to high resource usage (system_memory_usage 86.2% >= 85%). It will resume automatically when resource usage allows."
	if have := s.Warning(); have != want {
		t.Errorf("want %q, have %q", want, have)
	}
	// The recorded reason is the value that met the watermark, not the latest.
	s.Observe(mem(95), Defaults(), t0.Add(time.Second))
	if have := s.Warning(); have != want {
		t.Errorf("after a higher reading: want %q, have %q", want, have)
	}
	if have := s.Causes(); !slices.Equal(have, []Monitor{SystemMemoryUsage}) {
		t.Errorf("causes: want [system_memory_usage], have %v", have)
	}
	s.SuspendManually(t0.Add(2 * time.Second))
	want = "server is suspended by the operator and due to high resource usage (system_memory_usage 86.2% >= 85%). It will resume when the operator resumes it and resource usage allows."
	if have := s.Warning(); have != want {
		t.Errorf("both: want %q, have %q", want, have)
	}
	if have, want := s.Reason(), "system_memory_usage 86.2% >= 85%, suspended by the operator"; have != want {
		t.Errorf("reason: want %q, have %q", want, have)
	}
	s.Observe(mem(10), Defaults(), t0.Add(3*time.Second))
	want = "server is suspended by the operator. It will resume when the operator resumes it."
	if have := s.Warning(); have != want {
		t.Errorf("manual: want %q, have %q", want, have)
	}
}
