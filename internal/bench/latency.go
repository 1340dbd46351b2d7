package bench

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The latency targets (docs/performance.md, "Latency at low concurrency, and
// Redis against a naive script"): what Floodgate on Redis adds to the no-op
// hop, in multiples of one Redis round trip (rt) measured in the same run.
const (
	addedP50TargetConc1  = 1.3 // added p50 over (rt)'s p50 at concurrency 1
	addedP99TargetConc1  = 2.0 // added p99 over (rt)'s p99 at concurrency 1
	addedP50TargetConc16 = 1.5 // added p50 over (rt)'s p50 at concurrency 16
)

// The latency targets with Redis a network hop away (run --redis-rtt), at
// concurrency 1 and 16 and open-loop: added p50 and p99 over (rt)'s through
// the same proxy.
const (
	addedP50TargetHop = 1.2
	addedP99TargetHop = 1.5
)

// The Redis CPU targets: Redis' CPU per decision at most this many times
// the naive script's per call, in the same run.
const (
	naiveTargetDistinct = 0.35 // (b), distinct callers
	naiveTargetHot      = 0.2  // (c), one hot caller
)

// latencyTarget is the row's target at conc, as text, and whether the
// figures meet it; "" when the row has none (only Floodgate on Redis at
// concurrency 1 and 16 has one). hop is run --redis-rtt: with Redis a hop
// away the targets are its own. conc 0 is an open-loop cell.
func latencyTarget(sc scenario, conc int, hop time.Duration, p50Ratio, p99Ratio float64) (string, bool) {
	if !strings.HasPrefix(sc.server, "redis") || sc.server == redisDirect {
		return "", false
	}
	if hop > 0 {
		if conc != 0 && conc != 1 && conc != 16 {
			return "", false
		}
		return fmt.Sprintf("p50 ≤ %.1f, p99 ≤ %.1f", addedP50TargetHop, addedP99TargetHop),
			p50Ratio <= addedP50TargetHop && p99Ratio <= addedP99TargetHop
	}
	switch conc {
	case 1:
		return fmt.Sprintf("p50 ≤ %.1f, p99 ≤ %.1f", addedP50TargetConc1, addedP99TargetConc1),
			p50Ratio <= addedP50TargetConc1 && p99Ratio <= addedP99TargetConc1
	case 16:
		return fmt.Sprintf("p50 ≤ %.1f", addedP50TargetConc16), p50Ratio <= addedP50TargetConc16
	}
	return "", false
}

// latencyRows is, for every row but the baselines and the references, what
// it adds to its baseline's latency at the same concurrency (p50 and p99),
// and that in multiples of one Redis round trip (rt) at the same
// concurrency: the whole cell, and the p50 ratio round by round (each
// round's added p50 over (rt)'s p50 in the same round), lowest–highest
// (median). "-" where (rt) did not run, "?" where a figure cannot be
// computed. Nil when no row has a baseline. hop is run --redis-rtt (0:
// Redis on loopback), which chooses the targets.
func latencyRows(rows []row, hop time.Duration) [][]string {
	cells := byCell(rows)
	out := [][]string{{"scenario", "conc", "p50", "added p50", "added p99", "(rt) p50", "(rt) p99",
		"added p50 ÷ (rt) p50", "by round", "added p99 ÷ (rt) p99", "target (÷ rt)", "met?"}}
	for _, sc := range scenarios { // table order
		if sc.isBaseline() || sc.server == redisDirect {
			continue
		}
		for _, r := range rows {
			b, ok := cells[cellID{sc.baseID(), r.conc}]
			if r.sc.id != sc.id || !ok {
				continue
			}
			line := []string{r.sc.label, strconv.Itoa(r.conc), fmtDur(r.res.p50), "?", "?"}
			if r.res.p50 > 0 && b.res.p50 > 0 {
				line[3], line[4] = fmtAdded(r.res.p50-b.res.p50), fmtAdded(r.res.p99-b.res.p99)
			}
			rt, ok := cells[cellID{"rt", r.conc}]
			if !ok {
				out = append(out, append(line, "-", "-", "-", "-", "-", "-", "-"))
				continue
			}
			line = append(line, fmtDur(rt.res.p50), fmtDur(rt.res.p99))
			if line[3] == "?" || rt.res.p50 <= 0 || rt.res.p99 <= 0 {
				out = append(out, append(line, "?", "?", "?", "?", "?"))
				continue
			}
			p50 := float64(r.res.p50-b.res.p50) / float64(rt.res.p50)
			p99 := float64(r.res.p99-b.res.p99) / float64(rt.res.p99)
			var perRound []float64
			for i, c := range r.rounds {
				if i >= len(b.rounds) || i >= len(rt.rounds) {
					break
				}
				bc, tc := b.rounds[i], rt.rounds[i]
				if c.n > 0 && bc.n > 0 && tc.n > 0 && tc.p50 > 0 {
					perRound = append(perRound, float64(c.p50-bc.p50)/float64(tc.p50))
				}
			}
			rounds := "-"
			if len(perRound) >= 2 {
				rounds = spread(perRound)
			}
			target, met := latencyTarget(sc, r.conc, hop, p50, p99)
			metText := "-"
			if target == "" {
				target = "-"
			} else {
				metText = yesNo(met)
			}
			out = append(out, append(line, fmt.Sprintf("%.2f", p50), rounds, fmt.Sprintf("%.2f", p99), target, metText))
		}
	}
	if len(out) == 1 {
		return nil
	}
	return out
}

// naiveRows sets Redis' CPU per decision of (b) and (c) against the naive
// script's per call at each concurrency where (naive) ran: the ratios over
// the whole cell, whether each meets its target, and round by round (each
// round against (naive)'s round of the same index), lowest–highest
// (median). "-" where the scenario did not run, "?" where a figure cannot
// be computed. Nil when (naive) did not run.
func naiveRows(rows []row) [][]string {
	cells := byCell(rows)
	out := [][]string{{"conc", "Redis µs/dec (naive)",
		"(b)", "(b)/(naive)", fmt.Sprintf("≤ %.2f?", naiveTargetDistinct), "by round",
		"(c)", "(c)/(naive)", fmt.Sprintf("≤ %.2f?", naiveTargetHot), "by round"}}
	for _, nv := range rows {
		if nv.sc.id != "naive" {
			continue
		}
		cn := nv.costs()
		if cn.n == 0 || !cn.redisOK || cn.redis <= 0 {
			out = append(out, []string{strconv.Itoa(nv.conc), "?", "?", "?", "?", "?", "?", "?", "?", "?"})
			continue
		}
		line := []string{strconv.Itoa(nv.conc), fmt.Sprintf("%.1f", cn.redis)}
		for _, other := range []struct {
			id     string
			target float64
		}{{"b", naiveTargetDistinct}, {"c", naiveTargetHot}} {
			o, ok := cells[cellID{other.id, nv.conc}]
			if !ok {
				line = append(line, "-", "-", "-", "-")
				continue
			}
			co := o.costs()
			if co.n == 0 || !co.redisOK {
				line = append(line, "?", "?", "?", "?")
				continue
			}
			ratio := co.redis / cn.redis
			var perRound []float64
			for i, c := range o.rounds {
				if i >= len(nv.rounds) {
					break
				}
				nc := nv.rounds[i]
				if c.n > 0 && c.redisOK && nc.n > 0 && nc.redisOK && nc.redis > 0 {
					perRound = append(perRound, c.redis/nc.redis)
				}
			}
			rounds := "-"
			if len(perRound) >= 2 {
				rounds = spread(perRound)
			}
			line = append(line, fmt.Sprintf("%.1f", co.redis), fmt.Sprintf("%.2f", ratio), yesNo(ratio <= other.target), rounds)
		}
		out = append(out, line)
	}
	if len(out) == 1 {
		return nil
	}
	return out
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// fmtAdded renders a latency difference with its sign: "+132µs", "-4µs".
func fmtAdded(d time.Duration) string {
	switch {
	case d == 0:
		return "0µs"
	case d < 0:
		return "-" + fmtDur(-d)
	}
	return "+" + fmtDur(d)
}
