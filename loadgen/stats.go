package loadgen

import (
	"bytes"
	"math/bits"
	"strconv"
	"time"
)

// Counts are the call outcomes of one second or of the whole run. A call is
// one INVITE dialog (uac/uas) or one REGISTER or OPTIONS transaction.
type Counts struct {
	Offered   int64 // calls started (uac) or received (uas)
	Succeeded int64
	Failed    int64 // sum of the Failed* reasons
	// FailedTimeout: no final response (or, for uas, no ACK) within the
	// transaction timeout, 64*T1 by default.
	FailedTimeout int64
	Failed4xx     int64
	// Failed5xx excludes 503 with Retry-After, which is an overload refusal the
	// server meant to send and is counted in Failed503RetryAfter.
	Failed5xx           int64
	Failed503RetryAfter int64
	FailedOther         int64 // 3xx, 6xx, send errors, refused by the peer's transport
	Retransmissions     int64 // our own retransmitted requests or responses
	RetransReceived     int64 // duplicates received from the peer
	// Limited are calls due by the schedule but not started because -l calls
	// were already in flight (or, for register, the user's previous
	// transaction was).
	Limited    int64
	Unexpected int64 // messages matching no call, or not parsable
	SendErrors int64
	// Challenged counts 401 and 407 answered with credentials (-ap).
	Challenged int64
	// With -oc: Shed are calls due by the schedule but not started for the
	// server's RFC 7339 feedback, and OCFeedback the responses that
	// carried feedback.
	Shed, OCFeedback int64
}

func (c *Counts) add(o *Counts) {
	c.Offered += o.Offered
	c.Succeeded += o.Succeeded
	c.Failed += o.Failed
	c.FailedTimeout += o.FailedTimeout
	c.Failed4xx += o.Failed4xx
	c.Failed5xx += o.Failed5xx
	c.Failed503RetryAfter += o.Failed503RetryAfter
	c.FailedOther += o.FailedOther
	c.Retransmissions += o.Retransmissions
	c.RetransReceived += o.RetransReceived
	c.Limited += o.Limited
	c.Unexpected += o.Unexpected
	c.SendErrors += o.SendErrors
	c.Challenged += o.Challenged
	c.Shed += o.Shed
	c.OCFeedback += o.OCFeedback
}

// failReason classifies a final failure response.
type failReason int

const (
	failTimeout failReason = iota
	fail4xx
	fail5xx
	fail503RetryAfter
	failOther
	failSend       // counted as other
	failUnexpected // a request the scenario did not expect; counted as other
	failRetrans    // -max_retrans retransmissions unanswered; counted as timeout
)

// failName is the by-name tally's entry for failures without a response.
var failName = map[failReason]string{
	failTimeout:    "timeout",
	failOther:      "other",
	failSend:       "send error",
	failUnexpected: "unexpected message",
	failRetrans:    "max retransmissions",
}

func reasonOf(status int, retryAfter bool) failReason {
	switch {
	case status == 503 && retryAfter:
		return fail503RetryAfter
	case status >= 400 && status < 500:
		return fail4xx
	case status >= 500 && status < 600:
		return fail5xx
	}
	return failOther
}

// maxFailKeys bounds the distinct failure names a run tallies, so a peer
// that makes up reason phrases cannot grow the table without end.
const maxFailKeys = 64

// failTally counts failures by name: a response's status line ("404 Not
// Found"), or what went wrong ("timeout"). Values are pointers so that
// counting an existing name is a lookup without allocation.
type failTally map[string]*int64

func (f failTally) add(key []byte, n int64) {
	if p := f[string(key)]; p != nil {
		*p += n
		return
	}
	if len(f) >= maxFailKeys {
		key = []byte("other")
		if p := f["other"]; p != nil {
			*p += n
			return
		}
	}
	v := n
	f[string(key)] = &v
}

// snapshot copies the tally, nil when empty.
func (f failTally) snapshot() map[string]int64 {
	if len(f) == 0 {
		return nil
	}
	m := make(map[string]int64, len(f))
	for k, v := range f {
		m[k] = *v
	}
	return m
}

// statusKey appends the name a failure response is tallied under.
func statusKey(b []byte, m *msg) []byte {
	b = strconv.AppendInt(b, int64(m.status), 10)
	if r := bytes.TrimSpace(m.reason); len(r) > 0 {
		b = append(b, ' ')
		b = append(b, r[:min(len(r), 40)]...)
	}
	if m.status == 503 && m.retryAfter {
		b = append(b, " (Retry-After)"...)
	}
	return b
}

func (c *Counts) fail(r failReason) {
	c.Failed++
	switch r {
	case failTimeout, failRetrans:
		c.FailedTimeout++
	case fail4xx:
		c.Failed4xx++
	case fail5xx:
		c.Failed5xx++
	case fail503RetryAfter:
		c.Failed503RetryAfter++
	default:
		c.FailedOther++
	}
}

// Row is one second of a run, as written to the CSV.
type Row struct {
	Elapsed   time.Duration // end of this second since the start
	TargetCPS float64       // the schedule's rate in this second
	Counts                  // this second
	Total     Counts        // since the start
	Active    int64         // calls in flight at the end of the second
	SetupP50  time.Duration
	SetupP90  time.Duration
	SetupP99  time.Duration
	// GenLag is how late, at worst, a call started after its scheduled time.
	// More than a few milliseconds means sipload itself fell behind.
	GenLag time.Duration
	// GenCPU is sipload's own CPU time in this second, in percent of one core.
	GenCPU float64
	// RcvbufDrops are datagrams the kernel dropped on sipload's socket because
	// its receive buffer was full: lost by the generator, not the server.
	RcvbufDrops int64
	Groups      []GroupSample // from --scrape, in a fixed order for the run
	// Failures are this second's failed calls by status line or reason;
	// nil when none failed.
	Failures map[string]int64
	// OCLoss is, with -oc, the share of new calls the server's RFC 7339
	// feedback asks to shed at the end of the second, percent (0 once it
	// expired).
	OCLoss int
}

// GroupSample is a worker group's state read from the server's metrics.
type GroupSample struct {
	Group   string
	Load    float64 // sipvisor_profile_load_ratio, 0..1; NaN if not read
	Workers float64 // sipvisor_pool_workers, all states but exited; NaN if not read
}

// hist is a log-linear latency histogram: 32 sub-buckets per power of two of
// microseconds, so a percentile is within about 3% at any scale, in constant
// memory however many calls a run makes.
type hist struct {
	b [64 * 32]int64
	n int64
}

func histIndex(d time.Duration) int {
	us := uint64(d / time.Microsecond)
	if us < 32 {
		return int(us)
	}
	e := bits.Len64(us) - 6 // shift that keeps 6 significant bits
	return (e+1)*32 + int(us>>uint(e)) - 32
}

// histValue is the upper bound of bucket i, the value a percentile reports.
func histValue(i int) time.Duration {
	if i < 32 {
		return time.Duration(i) * time.Microsecond
	}
	e := i/32 - 1
	m := uint64(i%32 + 32)
	return time.Duration(((m+1)<<uint(e))-1) * time.Microsecond
}

func (h *hist) add(d time.Duration) {
	if d < 0 {
		d = 0
	}
	i := histIndex(d)
	if i >= len(h.b) {
		i = len(h.b) - 1
	}
	h.b[i]++
	h.n++
}

func (h *hist) merge(o *hist) {
	for i, v := range o.b {
		h.b[i] += v
	}
	h.n += o.n
}

// quantile returns the value at or below which q of the samples fall; 0 with
// no samples.
func (h *hist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := int64(q*float64(h.n) + 0.5)
	if rank < 1 {
		rank = 1
	}
	var s int64
	for i, v := range h.b {
		s += v
		if s >= rank {
			return histValue(i)
		}
	}
	return histValue(len(h.b) - 1)
}

func (h *hist) reset() { *h = hist{} }
