package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
)

// WriteJSON writes r as `floodgate replay --json` prints it.
func (r *Result) WriteJSON(w io.Writer) error { return WriteIndentedJSON(w, r) }

// WriteIndentedJSON writes v as indented JSON and a newline.
func WriteIndentedJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// WriteTable writes r as a table for people.
func (r *Result) WriteTable(w io.Writer) error {
	fmt.Fprintln(w, r.Summary())
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "policy\tmode\tcapacity\trefill/s\trequests\tallowed\tdenied\tby other\tcallers\tdenied callers\tcapacity needed p50/p90/p99/max")
	for _, p := range r.Policies {
		fmt.Fprintf(tw, "%s\t%s\n", p.Name, policyColumns(p))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range r.Policies {
		if len(p.TopDenied) > 0 {
			fmt.Fprintf(w, "\n%s: callers with the most denials\n", p.Name)
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "  caller\trequests\tdenied\tcapacity needed")
			for _, c := range p.TopDenied {
				fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\n", c.Caller, c.Requests, c.Denied, c.CapacityNeeded)
			}
			tw.Flush()
		}
		if len(p.Collateral) > 0 {
			fmt.Fprintf(w, "\n%s: denied client addresses and who was behind them (many: a NAT or proxy, collateral damage)\n", p.Name)
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "  caller\trequests\tdenied\tcapacity needed\tuser agents\tAPI keys")
			for _, c := range p.Collateral {
				fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%s\t%s\n", c.Caller, c.Requests, c.Denied, c.CapacityNeeded, atLeast(c.UserAgents), atLeast(c.APIKeys))
			}
			tw.Flush()
		}
	}
	return nil
}

// WriteComparison writes several runs of one log: as JSON, {"runs": [{"set":
// ..., the Result}, ...]}; as a table, the first run's summary line and one
// row per policy and run, with the columns of WriteTable and the run's --set.
func WriteComparison(w io.Writer, runs []Labeled, asJSON bool) error {
	if asJSON {
		type run struct {
			Set string `json:"set"`
			*Result
		}
		out := struct {
			Runs []run `json:"runs"`
		}{}
		for _, r := range runs {
			out.Runs = append(out.Runs, run{Set: r.Label, Result: r.Result})
		}
		return WriteIndentedJSON(w, out)
	}
	r0 := runs[0].Result
	fmt.Fprintln(w, r0.Summary())
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "policy\tset\tmode\tcapacity\trefill/s\trequests\tallowed\tdenied\tby other\tcallers\tdenied callers\tcapacity needed p50/p90/p99/max")
	for p := range r0.Policies {
		for _, r := range runs {
			set := r.Label
			if set == "" {
				set = "(configuration)"
			}
			x := r.Result.Policies[p]
			fmt.Fprintf(tw, "%s\t%s\t%s\n", x.Name, set, policyColumns(x))
		}
	}
	return tw.Flush()
}

// refillColumn is what the refill column shows: a bucket's refill per
// second, or a quota's window ("a month from day 15, Europe/Berlin").
func (p PolicyResult) refillColumn() string {
	if p.Quota != "" {
		return "a " + p.Quota
	}
	return p.RefillPerSecond
}

// policyColumns are a policy's columns after its name (and set), tab
// separated, as both tables print them.
func policyColumns(p PolicyResult) string {
	return fmt.Sprintf("%s\t%d\t%s\t%d\t%d\t%s\t%d\t%d\t%d\t%d/%d/%d/%d", p.Mode, p.Capacity, p.refillColumn(),
		p.Requests, p.Allowed, withShare(p.Denied, p.Requests), p.DeniedByOther, p.Callers, p.CallersDenied,
		p.CapacityNeeded.P50, p.CapacityNeeded.P90, p.CapacityNeeded.P99, p.CapacityNeeded.Max)
}

// Summary is the report's first line: what became of the log's lines, and
// the times it spans. Lines set aside (ahead, or beyond --max-callers) are
// named only when there are some.
func (r *Result) Summary() string {
	s := fmt.Sprintf("%d lines: %d decided, %d skipped, %d late", r.Lines, r.Decided, r.Skipped, r.Late)
	if r.Ahead > 0 {
		s += fmt.Sprintf(", %d ahead (set aside)", r.Ahead)
	}
	if r.BeyondMaxCallers > 0 {
		s += fmt.Sprintf(", %d beyond --max-callers %d (not decided: the report covers the first %d callers only)",
			r.BeyondMaxCallers, r.MaxCallers, r.MaxCallers)
	}
	if r.From != "" {
		s += fmt.Sprintf("; from %s to %s", r.From, r.To)
	}
	return s
}

func withShare(n, of int64) string {
	if n == 0 || of == 0 {
		return strconv.FormatInt(n, 10)
	}
	return fmt.Sprintf("%d (%.1f%%)", n, 100*float64(n)/float64(of))
}

func atLeast(n int) string {
	if n >= maxHashSet {
		return strconv.Itoa(n) + "+"
	}
	return strconv.Itoa(n)
}
