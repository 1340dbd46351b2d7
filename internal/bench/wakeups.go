package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

// What a decision wakes. A request that waits on Redis parks its goroutine
// and, when the machine has nothing else to run, its thread; each wake-up
// back costs tens of microseconds on a small machine. floodbench run
// --trace records a Go execution trace of floodgate over a round's window
// and counts, per decision, the goroutines woken, the threads woken to run
// them, the system calls and the waits on the network, and the three
// places that wake goroutines most often.

// traceScenarios are the scenarios --trace records: Redis with distinct
// keys and with one hot key, and the in-memory store, which costs what the
// no-op server does (the no-op server runs no profiler).
var traceScenarios = []string{"b", "c", "e"}

// tracedCell is one trace recorded during a cell's last round.
type tracedCell struct {
	sc   scenario
	conc int
	file string
}

// startTrace records an execution trace of a floodgate started with --pprof
// for d into dir/NAME.trace. The returned func waits for it and returns the
// file.
func startTrace(ctx context.Context, p *proc, dir, name string, d time.Duration) func() (string, error) {
	file := filepath.Join(dir, name+".trace")
	wait := startFetch(ctx, p, fmt.Sprintf("trace?seconds=%g", d.Seconds()), file, d)
	return func() (string, error) { return file, wait() }
}

// wakeups is what a trace holds, counted over its decisions.
type wakeups struct {
	decisions int // calls gRPC handed to a goroutine (started, or a stream worker woken)
	// goroutine wake-ups (waiting → runnable), threads woken to run a
	// processor (idle → running), system calls, and goroutines parked on
	// the network poller.
	goWakes, procStarts, syscalls, netParks int
	wakers                                  map[string]int // wake-ups by the first frame outside the runtime
	// Per call that ran to its end within the trace: from gRPC handing it
	// to a goroutine to its goroutine's end (or its worker waiting for the
	// next), and the time it spent parked on the network (on Redis' reply,
	// when the store is Redis), sorted.
	lifetimes, netWaits []time.Duration
}

// callGoroutine is a call being followed through the trace, on its
// goroutine.
type callGoroutine struct {
	start, parked trace.Time // parked: when it last parked on the network (0: not parked)
	netWait       time.Duration
}

// countWakeups reads the execution trace in r.
func countWakeups(r io.Reader) (wakeups, error) {
	tr, err := trace.NewReader(r)
	if err != nil {
		return wakeups{}, err
	}
	w := wakeups{wakers: map[string]int{}}
	calls := map[trace.GoID]*callGoroutine{}
	for {
		ev, err := tr.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			return wakeups{}, err
		}
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		switch st.Resource.Kind {
		case trace.ResourceProc:
			if from, to := st.Proc(); from == trace.ProcIdle && to == trace.ProcRunning {
				w.procStarts++
			}
		case trace.ResourceGoroutine:
			from, to := st.Goroutine()
			id := st.Resource.Goroutine()
			g := calls[id]
			if to == trace.GoRunnable {
				site := firstOutsideRuntime(ev.Stack())
				if from == trace.GoWaiting {
					w.goWakes++
					w.wakers[site]++
				}
				switch {
				case callStarts(from, ev.Stack(), st.Stack):
					w.decisions++
					calls[id] = &callGoroutine{start: ev.Time()}
				case g != nil && g.parked != 0:
					g.netWait += time.Duration(ev.Time() - g.parked)
					g.parked = 0
				}
				continue
			}
			switch {
			case to == trace.GoSyscall:
				w.syscalls++
			case to == trace.GoWaiting && st.Reason == "network":
				w.netParks++
				if g != nil {
					g.parked = ev.Time()
				}
			case g != nil && (to == trace.GoNotExist || to == trace.GoWaiting && strings.HasPrefix(firstOutsideRuntime(ev.Stack()), serverWorker)):
				// The call ends: its goroutine exits, or the worker waits
				// for the next call.
				w.lifetimes = append(w.lifetimes, time.Duration(ev.Time()-g.start))
				w.netWaits = append(w.netWaits, g.netWait)
				delete(calls, id)
			}
		}
	}
	slices.Sort(w.lifetimes)
	slices.Sort(w.netWaits)
	if w.decisions == 0 {
		return w, fmt.Errorf("the trace holds no gRPC call")
	}
	return w, nil
}

// callStarts reports whether a goroutine made runnable is gRPC handing it a
// call: from the state it leaves, the stack of the goroutine that made it
// runnable (waker) and, for a new goroutine, its own (started). A call
// starts on a goroutine serveStreams creates to run its closure, or on a
// stream worker serveStreams wakes by sending it the call on a channel.
//
// The first frame outside the runtime is not enough: a goroutine preempted
// while in serveStreams' closure (Running → Runnable, with its own stack) is
// no call, nor is a goroutine of the runtime's (the scavenger, a GC worker)
// woken while serveStreams allocates. Each made a trace of 50 calls count 51,
// now and then.
func callStarts(from trace.GoState, waker, started trace.Stack) bool {
	site, called := firstOutsideRuntimeAndCallee(waker)
	if !strings.HasPrefix(site, serveStreams) {
		return false
	}
	switch from {
	case trace.GoWaiting:
		return strings.HasPrefix(called, "runtime.selectnbsend") || strings.HasPrefix(called, "runtime.chansend")
	case trace.GoNotExist:
		return strings.HasPrefix(firstOutsideRuntime(started), serveStreams)
	}
	return false
}

// firstOutsideRuntimeAndCallee is firstOutsideRuntime(s) and the runtime
// function that frame called ("" when it called none).
func firstOutsideRuntimeAndCallee(s trace.Stack) (site, callee string) {
	for f := range s.Frames() {
		if strings.HasPrefix(f.Func, "runtime.") {
			callee = f.Func
			continue
		}
		return f.Func[strings.LastIndex(f.Func, "/")+1:], callee
	}
	return "netpoller", ""
}

// gRPC hands a call to its goroutine in Server.serveStreams: it starts one
// for it, or wakes a stream worker (grpc.NumStreamWorkers) waiting in
// Server.serverWorker (google.golang.org/grpc, server.go).
const (
	serveStreams = "grpc.(*Server).serveStreams"
	serverWorker = "grpc.(*Server).serverWorker"
)

// firstOutsideRuntime names a wake-up's site: the first function of its
// stack outside the runtime, without its package path; "netpoller" when the
// stack is empty (the scheduler found the goroutine ready on the network).
func firstOutsideRuntime(s trace.Stack) string {
	for f := range s.Frames() {
		if strings.HasPrefix(f.Func, "runtime.") {
			continue
		}
		return f.Func[strings.LastIndex(f.Func, "/")+1:]
	}
	return "netpoller"
}

// perDecision divides n by the decisions.
func (w wakeups) perDecision(n int) string {
	return fmt.Sprintf("%.2f", float64(n)/float64(w.decisions))
}

// topWakers returns the n sites that woke goroutines most, with their
// wake-ups per decision.
func (w wakeups) topWakers(n int) string {
	sites := make([]string, 0, len(w.wakers))
	for s := range w.wakers {
		sites = append(sites, s)
	}
	slices.SortFunc(sites, func(a, b string) int {
		if w.wakers[a] != w.wakers[b] {
			return w.wakers[b] - w.wakers[a]
		}
		return strings.Compare(a, b)
	})
	var out []string
	for _, s := range sites[:min(n, len(sites))] {
		out = append(out, fmt.Sprintf("%s %s", s, w.perDecision(w.wakers[s])))
	}
	return strings.Join(out, "; ")
}

var concInName = regexp.MustCompile(`-c([0-9]+)\.trace$`)

// wakeupRows is the table of the traced cells.
func wakeupRows(cells []tracedCell) ([][]string, error) {
	out := [][]string{{"scenario", "conc", "decisions traced", "goroutine wake-ups/dec", "thread wake-ups/dec", "syscalls/dec", "network waits/dec", "call p50", "of which on the network p50", "most wake-ups from (per decision)"}}
	for _, c := range cells {
		f, err := os.Open(c.file)
		if err != nil {
			return nil, err
		}
		w, err := countWakeups(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.file, err)
		}
		conc := "-"
		if c.conc > 0 {
			conc = fmt.Sprint(c.conc)
		}
		out = append(out, []string{c.sc.label, conc, fmt.Sprint(w.decisions),
			w.perDecision(w.goWakes), w.perDecision(w.procStarts), w.perDecision(w.syscalls), w.perDecision(w.netParks),
			fmtDur(percentile(w.lifetimes, 50)), fmtDur(percentile(w.netWaits, 50)), w.topWakers(3)})
	}
	return out, nil
}

// Wakeups prints the table for trace files given by name (a trace of
// floodgate's /debug/pprof/trace, say, taken while floodbench load drives
// it); run --trace's file names give the concurrency.
func Wakeups(files []string, stdout io.Writer) error {
	cells := make([]tracedCell, len(files))
	for i, f := range files {
		cells[i] = tracedCell{sc: scenario{label: filepath.Base(f)}, file: f}
		// run --trace names its files floodgate-SCENARIO-cCONC.trace.
		if m := concInName.FindStringSubmatch(filepath.Base(f)); m != nil {
			cells[i].conc, _ = strconv.Atoi(m[1])
		}
	}
	t, err := wakeupRows(cells)
	if err != nil {
		return err
	}
	writeMarkdown(stdout, t)
	return nil
}
