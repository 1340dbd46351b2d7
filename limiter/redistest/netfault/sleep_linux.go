package netfault

import (
	"syscall"
	"time"
)

// sleepUntil sleeps in the kernel until t (a Go timer would wait a whole
// millisecond when the process has nothing else to do), its thread's timer
// slack first set to a nanosecond: Linux's default lets a sleep end up to
// 50 µs late, on each of the two sleeps of a round trip. The goroutine's
// thread sleeps; the runtime gives its other goroutines another.
func sleepUntil(t time.Time) {
	for {
		d := time.Until(t)
		if d <= 0 {
			return
		}
		syscall.Syscall(syscall.SYS_PRCTL, prSetTimerSlack, 1, 0)
		ts := syscall.NsecToTimespec(d.Nanoseconds())
		if err := syscall.Nanosleep(&ts, nil); err == nil {
			return
		}
		// EINTR (a signal, as the Go runtime sends its threads): sleep
		// what is left.
	}
}

// prSetTimerSlack is prctl's PR_SET_TIMERSLACK (linux/prctl.h).
const prSetTimerSlack = 29
