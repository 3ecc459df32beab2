package ctl_test

import (
	"errors"
	"fmt"

	"github.com/sipvisor/sipvisor/ctl"
)

// A setting lives where it is used; Params routes, parses and validates, and
// the setter has the last word.
func ExampleParams() {
	high, low := 85.0, 70.0
	p := ctl.NewParams()
	p.Register("suspend_watermarks/system_memory_usage/high", func() float64 { return high }, func(v float64) error {
		if v <= low {
			return errors.New("high watermark must be over the low one")
		}
		high = v
		return nil
	}, ctl.Percent)
	p.Register("suspend_watermarks/system_memory_usage/low", func() float64 { return low }, nil, ctl.Percent)

	err := p.Set("suspend_watermarks/system_memory_usage/high", "120")
	fmt.Println(err)
	err = p.Set("suspend_watermarks/system_memory_usage/high", "60")
	fmt.Println(err)
	err = p.Set("suspend_watermarks/system_memory_usage/hihg", "90")
	fmt.Println(err)
	err = p.Set("suspend_watermarks/system_memory_usage/high", "90%")
	v, _ := p.Get("suspend_watermarks/system_memory_usage")
	fmt.Println(err, v)
	// Output:
	// suspend_watermarks/system_memory_usage/high: percentage 120 is outside 0–100
	// suspend_watermarks/system_memory_usage/high: high watermark must be over the low one
	// unknown path "suspend_watermarks/system_memory_usage/hihg" (did you mean "suspend_watermarks/system_memory_usage/high"?)
	// <nil> map[high:90 low:70]
}
