package profile_test

import (
	"fmt"

	"github.com/sipvisor/sipvisor/profile"
)

// The seed's profile: `scale up to 6 on 70% for 4 cycles within 5 scale down
// to 2 on 18% for 10 cycles`.
var profileA = profile.Profile{Name: "PROFILE_A", UpTo: 6, UpLoad: 70, UpCycles: 4, Window: 5,
	DownTo: 2, DownLoad: 18, DownCycles: 10}

func ExampleDecide() {
	d := profile.Decide(profileA, profile.State{
		Workers: 4,
		History: []float64{80, 90, 75, 60, 85},
		Cycle:   120,
	})
	fmt.Printf("%v: %s, %.1f%% expected\n", d.Action, d.Reason, d.EstimatedLoad)
	// Output: up: load over up threshold, 62.4% expected
}

// The cycle loop: sample, add to the ring, decide, act, rescale.
func ExampleDecide_cycleLoop() {
	h := profile.NewHistory(profileA.HistoryLen())
	buf := make([]float64, 0, profileA.HistoryLen())
	workers, lastFork := 4, int64(0)
	const work = 28.0 // percent of one worker the traffic needs: 7% on 4
	for cycle := int64(1); cycle <= 110; cycle++ {
		h.Add(work / float64(workers))
		d := profile.Decide(profileA, profile.State{Workers: workers, History: h.Values(buf), Cycle: cycle, LastFork: lastFork})
		switch d.Action {
		case profile.Up:
			h.Rescale(workers, workers+1)
			workers++
			lastFork = cycle
		case profile.Down:
			h.Rescale(workers, workers-1)
			workers--
		default:
			continue
		}
		fmt.Printf("cycle %d: %v to %d workers (%s), %.1f%% expected\n", cycle, d.Action, workers, d.Reason, d.EstimatedLoad)
	}
	// Output:
	// cycle 100: down to 3 workers (load under down threshold), 9.3% expected
	// cycle 101: down to 2 workers (load under down threshold), 14.0% expected
}
