package throttle_test

import (
	"fmt"
	"time"

	"github.com/sipvisor/sipvisor/overload/throttle"
)

func Example() {
	th := throttle.New(throttle.DefaultConfig())
	for _, ms := range []int{850, 1021, 1130, 1158, 1127, 1135, 1126, 1000, 991, 998} {
		if share, changed := th.Observe(time.Duration(ms) * time.Millisecond); changed {
			fmt.Printf("%d ms: refusing %.0f%% of new sessions\n", ms, 100*share)
		}
	}
	// Output:
	// 1158 ms: refusing 10% of new sessions
	// 1126 ms: refusing 20% of new sessions
	// 998 ms: refusing 0% of new sessions
}

func ExampleThrottle_Admit() {
	th := throttle.New(throttle.DefaultConfig())
	for range 3 {
		th.Observe(1500 * time.Millisecond)
	}
	for n := range uint64(20) {
		if !th.Admit(n) {
			fmt.Println("503 for new session", n)
		}
	}
	// Output:
	// 503 for new session 9
	// 503 for new session 19
}
