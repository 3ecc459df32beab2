package steering

import (
	"math"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/overload"
)

// A group whose workers read connections gets the gate and quotas a port's
// workers get, whatever its slow start or table, and the pace of a gate:
// quick while it is closed, limited or just changed, quiet otherwise.
func TestPlanStream(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	settledLast := State{Refreshed: true, ChangedAt: now.Add(-time.Minute)}
	room := func(calls int64) [Kinds]int64 {
		r := unlimited()
		r[sipscan.KindCall] = calls
		return r
	}
	for _, tc := range []struct {
		name       string
		in         Inputs
		gate       uint64
		callQuota  []uint64
		queueDelay uint64
		pace       time.Duration
	}{
		{name: "open, first refresh",
			in:   Inputs{Room: unlimited(), RetryAfter: 5, Workers: []Worker{{ID: 1}, {ID: 2}}},
			gate: wire.Gate(true, false, 5), callQuota: []uint64{math.MaxUint64, math.MaxUint64}, pace: Every},
		{name: "open, settled",
			in:   Inputs{Room: unlimited(), RetryAfter: 5, Workers: []Worker{{ID: 1}}, Last: settledLast, QueueDelay: 250e6},
			gate: wire.Gate(true, false, 5), callQuota: []uint64{math.MaxUint64}, queueDelay: 250e6, pace: quiet},
		{name: "a call limit shares half the room",
			in: Inputs{Room: room(40), RetryAfter: 5, Last: settledLast,
				Workers: []Worker{{ID: 1, Admitted: [Kinds]uint64{sipscan.KindCall: 100}}, {ID: 2}}},
			gate: wire.Gate(true, false, 5), callQuota: []uint64{110, 10}, pace: Every},
		{name: "throttled: ask",
			in:   Inputs{Closed: "throttle", Room: unlimited(), RetryAfter: 5, Last: settledLast, Workers: []Worker{{ID: 1}}},
			gate: wire.Gate(false, false, 5), callQuota: []uint64{math.MaxUint64}, pace: Every},
		{name: "suspended: refuse alone",
			in: Inputs{Closed: overload.ClosedSuspended, ProbesRefused: true, Room: unlimited(), RetryAfter: 9, Last: settledLast,
				Workers: []Worker{{ID: 1}}},
			gate: wire.Gate(false, true, 9) | wire.GateRefuseAll, callQuota: []uint64{math.MaxUint64}, pace: Every},
		{name: "suspended a while, one Retry-After: refreshed at the quiet pace",
			in: Inputs{Closed: overload.ClosedSuspended, ProbesRefused: true, Room: unlimited(), RetryAfter: 9,
				Last: State{Refreshed: true, Closed: overload.ClosedSuspended, ChangedAt: now.Add(-time.Minute)}, Workers: []Worker{{ID: 1}}},
			gate: wire.Gate(false, true, 9) | wire.GateRefuseAll, callQuota: []uint64{math.MaxUint64}, pace: quiet},
		{name: "suspended a while, a Retry-After drawn from a range: drawn again at every refresh",
			in: Inputs{Closed: overload.ClosedSuspended, ProbesRefused: true, RetryAfterDrawn: true, Room: unlimited(), RetryAfter: 9,
				Last: State{Refreshed: true, Closed: overload.ClosedSuspended, ChangedAt: now.Add(-time.Minute)}, Workers: []Worker{{ID: 1}}},
			gate: wire.Gate(false, true, 9) | wire.GateRefuseAll, callQuota: []uint64{math.MaxUint64}, pace: Every},
		{name: "handed over: ask, and the old supervisor admits",
			in: Inputs{Closed: "stopping", ProbesRefused: true, HandedOver: true, Room: unlimited(), RetryAfter: 9, Last: settledLast,
				QueueDelay: 250e6, Workers: []Worker{{ID: 1}}},
			gate: wire.Gate(false, false, 9), callQuota: []uint64{math.MaxUint64}, pace: Every},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Now = now
			a := PlanStream(tc.in)
			if a.Gate != tc.gate {
				t.Errorf("gate: want %#x, have %#x", tc.gate, a.Gate)
			}
			if a.QueueDelay != tc.queueDelay {
				t.Errorf("queue delay: want %d, have %d", tc.queueDelay, a.QueueDelay)
			}
			if len(a.Quotas) != len(tc.in.Workers) {
				t.Fatalf("quotas: want one per worker, have %d", len(a.Quotas))
			}
			for i, q := range tc.callQuota {
				if a.Quotas[i][sipscan.KindCall] != q {
					t.Errorf("worker %d's call quota: want %d, have %d", i+1, q, a.Quotas[i][sipscan.KindCall])
				}
			}
			if a.Pace != tc.pace {
				t.Errorf("pace: want %v, have %v", tc.pace, a.Pace)
			}
			if !a.Next.Refreshed || a.Next.Closed != tc.in.Closed {
				t.Errorf("next state: want refreshed with closed %q, have %+v", tc.in.Closed, a.Next)
			}
			// Plan gives a port's workers the same words.
			p := Plan(tc.in)
			if p.Gate != a.Gate || p.QueueDelay != a.QueueDelay {
				t.Errorf("Plan's words: gate %#x, queue delay %d; PlanStream's %#x, %d", p.Gate, p.QueueDelay, a.Gate, a.QueueDelay)
			}
		})
	}
}
