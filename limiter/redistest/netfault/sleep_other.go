//go:build !linux

package netfault

import "time"

// sleepUntil sleeps until t. Elsewhere than on Linux a Go timer: a delay
// below a millisecond may come out as one when the process is idle.
func sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }
