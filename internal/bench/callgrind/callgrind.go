// Package callgrind counts instructions with valgrind's callgrind, for
// floodbench instructions. A process run under callgrind counts the
// instructions it executes (event Ir), every thread's, whatever else the
// machine runs; callgrind_control zeroes the counts of a running process and
// dumps them to a file on request (through valgrind's gdbserver, vgdb), so
// the instructions of a window of requests can be read without its start-up
// or shutdown.
package callgrind

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// callgrindDump is what a callgrind output file says about its part: the
// events counted, their totals, and what triggered the dump.
type callgrindDump struct {
	events  []string
	totals  []uint64
	trigger string // "desc: Trigger: dump DESC" names DESC as "dump DESC"
}

// count returns the total of event (Ir, the instructions executed).
func (d callgrindDump) count(event string) (uint64, bool) {
	for i, e := range d.events {
		if e == event && i < len(d.totals) {
			return d.totals[i], true
		}
	}
	return 0, false
}

// readCallgrind reads a callgrind output file (callgrind's format, version
// 1: a header of "key: value" lines, the events named on "events:", and the
// part's totals on "summary:" at its top and "totals:" at its end; the cost
// lines between are not needed here). The totals are "totals:"'s, the sum
// of the costs the file holds (what callgrind_annotate shows), or
// "summary:"'s in a file without them. The two may differ by a little:
// callgrind writes the summary as the dump starts, from counts the
// process' threads may not all have added to yet. Events missing from a
// totals line count 0, as the format says.
func readCallgrind(r io.Reader) (callgrindDump, error) {
	var d callgrindDump
	var summary, totals []uint64
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	first := true
	for sc.Scan() {
		line := sc.Text()
		if first {
			first = false
			if !strings.HasPrefix(line, "# callgrind format") && !strings.HasPrefix(line, "version:") && !strings.HasPrefix(line, "events:") {
				if len(line) > 40 {
					line = line[:40] + "…"
				}
				return d, fmt.Errorf("not a callgrind output file (first line %q)", line)
			}
		}
		key, val, ok := strings.Cut(line, ":")
		if !ok || strings.ContainsAny(key, " =") && key != "desc" {
			continue // a cost line or a name line (fn=, fl=, calls=)
		}
		val = strings.TrimSpace(val)
		switch key {
		case "version":
			if val != "1" {
				return d, fmt.Errorf("callgrind format version %s, want 1", val)
			}
		case "events":
			d.events = strings.Fields(val)
		case "summary", "totals":
			var n []uint64
			for _, f := range strings.Fields(val) {
				x, err := strconv.ParseUint(f, 10, 64)
				if err != nil {
					return d, fmt.Errorf("%s: %q is not a count", key, f)
				}
				n = append(n, x)
			}
			if key == "summary" {
				summary = n
			} else {
				totals = n
			}
		case "desc":
			if t, ok := strings.CutPrefix(val, "Trigger:"); ok {
				d.trigger = strings.TrimSpace(t)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return d, err
	}
	if len(d.events) == 0 {
		return d, fmt.Errorf("no events line")
	}
	switch {
	case totals != nil:
		d.totals = totals
	case summary != nil:
		d.totals = summary
	default:
		return d, fmt.Errorf("no summary or totals line")
	}
	if len(d.totals) > len(d.events) {
		return d, fmt.Errorf("%d totals for %d events", len(d.totals), len(d.events))
	}
	for len(d.totals) < len(d.events) {
		d.totals = append(d.totals, 0)
	}
	return d, nil
}

// Run is a process started under callgrind with Args(Out).
type Run struct {
	PID     int
	Control string // callgrind_control
	Out     string // --callgrind-out-file, before its ".%p"
	dumps   int    // dumps asked for so far
}

// Args are valgrind's arguments to run a command under callgrind
// writing to out.PID (and out.PID.N for the Nth dump asked for).
func Args(out string) []string {
	return []string{"--tool=callgrind", "--callgrind-out-file=" + out + ".%p"}
}

// ctl runs callgrind_control with args on the process, which acknowledges
// with "OK.".
func (c *Run) ctl(ctx context.Context, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, c.Control, append(args, strconv.Itoa(c.PID))...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "OK.") {
		return fmt.Errorf("%s %s %d: %v: %s", c.Control, strings.Join(args, " "), c.PID, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Zero zeroes the process' counts.
func (c *Run) Zero(ctx context.Context) error { return c.ctl(ctx, "--zero") }

// Instructions dumps the counts since the last zero or dump and returns
// the instructions executed.
func (c *Run) Instructions(ctx context.Context) (uint64, error) {
	c.dumps++
	desc := fmt.Sprintf("floodbench-%d", c.dumps)
	if err := c.ctl(ctx, "--dump="+desc); err != nil {
		return 0, err
	}
	file := fmt.Sprintf("%s.%d.%d", c.Out, c.PID, c.dumps)
	f, err := os.Open(file)
	if err != nil {
		return 0, fmt.Errorf("callgrind's dump: %w (files: %v)", err, globNames(c.Out+".*"))
	}
	defer f.Close()
	d, err := readCallgrind(f)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", file, err)
	}
	if d.trigger != "dump "+desc {
		return 0, fmt.Errorf("%s: the dump of %q, want %q", file, d.trigger, "dump "+desc)
	}
	ir, ok := d.count("Ir")
	if !ok {
		return 0, fmt.Errorf("%s: no Ir among the events %v", file, d.events)
	}
	return ir, nil
}

func globNames(pattern string) []string {
	m, _ := filepath.Glob(pattern)
	for i := range m {
		m[i] = filepath.Base(m[i])
	}
	return m
}
