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
	fmt.Fprintf(w, "%d lines: %d decided, %d skipped, %d late", r.Lines, r.Decided, r.Skipped, r.Late)
	if r.From != "" {
		fmt.Fprintf(w, "; from %s to %s", r.From, r.To)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "policy\tmode\tcapacity\trefill/s\trequests\tallowed\tdenied\tby other\tcallers\tdenied callers\tcapacity needed p50/p90/p99/max")
	for _, p := range r.Policies {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%s\t%d\t%d\t%d\t%d/%d/%d/%d\n", p.Name, p.Mode, p.Capacity, p.RefillPerSecond,
			p.Requests, p.Allowed, withShare(p.Denied, p.Requests), p.DeniedByOther, p.Callers, p.CallersDenied,
			p.CapacityNeeded.P50, p.CapacityNeeded.P90, p.CapacityNeeded.P99, p.CapacityNeeded.Max)
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
