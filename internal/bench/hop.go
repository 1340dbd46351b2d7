package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"
)

// run --redis-rtt's defaults: the rows whose decisions wait on Redis and
// their baselines, at the concurrencies of the hop's latency targets, and
// the same rows open-loop at two rates (a Redis a hop away, delay.go).
const (
	HopScenarios = "a,b,c,b-rls,rt"
	HopConc      = "1,16"
	HopRates     = "500,2000"
)

// measureOpen measures the open-loop cells (--rates): each scenario at each
// rate, at most the highest --conc in flight, in rounds taking turns as the
// closed-loop cells do. Nil when there are no rates.
func (m *measurer) measureOpen(ctx context.Context, stderr io.Writer) ([]row, error) {
	o := m.o
	if len(o.Rates) == 0 {
		return nil, nil
	}
	inFlight := slices.Max(o.Conc)
	fmt.Fprintf(stderr, "floodbench: %d open-loop cells of %v in %d rounds, at most %d in flight\n", len(m.scs)*len(o.Rates), o.Cell, o.Rounds, inFlight)
	var rows []row
	for _, rate := range o.Rates {
		cells := make([]row, len(m.scs))
		for i, sc := range m.scs {
			cells[i] = row{sc: sc, conc: inFlight, rate: rate}
		}
		for rd := 0; rd < o.Rounds; rd++ {
			for i := range cells {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				if _, err := m.measureRound(ctx, &cells[i], false, stderr); err != nil {
					return nil, err
				}
			}
		}
		for _, r := range cells {
			fmt.Fprintf(stderr, "  %s, %.0f/s offered: %.0f/s answered\n", r.sc.label, rate, r.res.rate())
		}
		rows = append(rows, cells...)
	}
	return rows, nil
}

// openLoopCaption says what the open-loop table holds.
func openLoopCaption(o Options) string {
	targets := "no targets on loopback"
	if o.RedisRTT > 0 {
		targets = fmt.Sprintf("targets for Floodgate on Redis a hop away: added p50 ≤ %.1f × (rt)'s p50 and added p99 ≤ %.1f × (rt)'s p99", addedP50TargetHop, addedP99TargetHop)
	}
	return fmt.Sprintf("open-loop (requests sent at Poisson arrivals averaging the offered rate whatever the answers do, each timed from its scheduled send, at most %d in flight, as floodbench load --rate sends them): latency added over the baseline ((a), or (a')) at the same rate, and that in multiples of (rt)'s at the same rate; %s",
		slices.Max(o.Conc), targets)
}

// openLoopRows is the open-loop table: for every row but the baselines and
// the references, at each rate, what it answered, its latencies, what it
// adds over its baseline at the same rate, and that over (rt)'s at the same
// rate, with the targets (latencyTarget, open-loop). "-" where (rt) did not
// run, "?" where a figure cannot be computed. Nil without open-loop rows.
func openLoopRows(rows []row, hop time.Duration) [][]string {
	type key struct {
		id   string
		rate float64
	}
	at := map[key]row{}
	for _, r := range rows {
		at[key{r.sc.id, r.rate}] = r
	}
	out := [][]string{{"scenario", "offered/s", "answered/s", "p50", "p99", "added p50", "added p99", "(rt) p50", "(rt) p99",
		"added p50 ÷ (rt) p50", "added p99 ÷ (rt) p99", "target (÷ rt)", "met?"}}
	for _, sc := range scenarios { // table order
		if sc.id == "a" || sc.id == "a'" || sc.server == redisDirect {
			continue
		}
		for _, r := range rows {
			if r.sc.id != sc.id {
				continue
			}
			line := []string{sc.label, strconv.FormatFloat(r.rate, 'f', -1, 64), fmt.Sprintf("%.0f", r.res.rate()), fmtDur(r.res.p50), fmtDur(r.res.p99), "?", "?"}
			b, ok := at[key{sc.baseID(), r.rate}]
			if ok && r.res.p50 > 0 && b.res.p50 > 0 {
				line[5], line[6] = fmtAdded(r.res.p50-b.res.p50), fmtAdded(r.res.p99-b.res.p99)
			}
			rt, ok := at[key{"rt", r.rate}]
			if !ok {
				out = append(out, append(line, "-", "-", "-", "-", "-", "-"))
				continue
			}
			line = append(line, fmtDur(rt.res.p50), fmtDur(rt.res.p99))
			if line[5] == "?" || rt.res.p50 <= 0 || rt.res.p99 <= 0 {
				out = append(out, append(line, "?", "?", "?", "?"))
				continue
			}
			p50 := float64(r.res.p50-b.res.p50) / float64(rt.res.p50)
			p99 := float64(r.res.p99-b.res.p99) / float64(rt.res.p99)
			target, met := latencyTarget(sc, 0, hop, p50, p99)
			metText := "-"
			if target == "" {
				target = "-"
			} else {
				metText = yesNo(met)
			}
			out = append(out, append(line, fmt.Sprintf("%.2f", p50), fmt.Sprintf("%.2f", p99), target, metText))
		}
	}
	if len(out) == 1 {
		return nil
	}
	return out
}
