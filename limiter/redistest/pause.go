package redistest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// PauseProcess stops p with SIGSTOP and returns once every thread of it
// has stopped. The signal stops a thread only when the thread next runs
// in the kernel's signal path, and a thread busy on another CPU of a loaded
// machine can answer a request first; a test that pauses a process to see
// it answer nothing must wait for the stop, as this does (up to 5 s,
// reading each thread's state in /proc/PID/task/*/stat).
func PauseProcess(p *os.Process) error {
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		running, err := runningThreads(p.Pid)
		if err != nil || running == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d: %d threads still running 5s after SIGSTOP", p.Pid, running)
		}
		time.Sleep(time.Millisecond) // the kernel offers nothing to wait on for another process' stop
	}
}

// runningThreads counts the threads of pid not stopped (state T or t).
func runningThreads(pid int) (int, error) {
	stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(stats) == 0 {
		return 0, fmt.Errorf("process %d: no threads in /proc: %v", pid, err)
	}
	n := 0
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		// The state follows the command name, which is in parentheses
		// and may hold spaces: read it after the last ')'.
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
			if st := s[i+2]; st != 'T' && st != 't' {
				n++
			}
		}
	}
	return n, nil
}
