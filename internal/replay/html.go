package replay

import (
	"fmt"
	"html"
	"io"
	"strings"
	"time"
)

// Labeled is one replay of a log, as a report shows it.
type Labeled struct {
	Label  string // the --set overrides; "" for the configuration as it is
	Result *Result
}

// WriteHTML writes runs as one self-contained page: no scripts, no styles or
// images fetched, one inline SVG chart per policy and run (requests and
// would-be denials over time; the distribution of capacity_needed over
// callers with the configured capacity marked). The page is also
// well-formed XML, so it can be checked with any XML parser.
func WriteHTML(w io.Writer, configName string, runs []Labeled) error {
	var b strings.Builder
	esc := html.EscapeString
	b.WriteString(`<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" lang="en">
<head>
<meta charset="utf-8"/>
<title>floodgate replay</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
td, th { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: right; }
th { background: #f4f4f4; }
td.name { text-align: left; }
</style>
</head>
<body>
`)
	fmt.Fprintf(&b, "<h1>floodgate replay with %s</h1>\n", esc(configName))
	for _, run := range runs {
		if len(runs) > 1 {
			label := run.Label
			if label == "" {
				label = "the configuration as it is"
			}
			fmt.Fprintf(&b, "<h2>%s</h2>\n", esc(label))
		}
		writeRun(&b, run.Result)
	}
	b.WriteString("</body>\n</html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func writeRun(b *strings.Builder, r *Result) {
	esc := html.EscapeString
	fmt.Fprintf(b, "<p>%s.</p>\n", esc(r.Summary()))
	b.WriteString("<table>\n<tr><th>policy</th><th>mode</th><th>capacity</th><th>refill/s</th><th>requests</th><th>allowed</th><th>denied</th><th>denied by other</th><th>callers</th><th>denied callers</th><th>capacity needed p50</th><th>p90</th><th>p99</th><th>max</th></tr>\n")
	for _, p := range r.Policies {
		fmt.Fprintf(b, "<tr><td class=\"name\">%s</td><td>%s</td><td>%d</td><td>%s</td><td>%d</td><td>%d</td><td>%s</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td></tr>\n",
			esc(p.Name), p.Mode, p.Capacity, esc(p.refillColumn()), p.Requests, p.Allowed, withShare(p.Denied, p.Requests), p.DeniedByOther, p.Callers,
			p.CallersDenied, p.CapacityNeeded.P50, p.CapacityNeeded.P90, p.CapacityNeeded.P99, p.CapacityNeeded.Max)
	}
	b.WriteString("</table>\n")
	for _, p := range r.Policies {
		fmt.Fprintf(b, "<h3>%s</h3>\n", esc(p.Name))
		chart(b, &p)
		if len(p.TopDenied) > 0 {
			b.WriteString("<table>\n<tr><th>caller</th><th>requests</th><th>denied</th><th>capacity needed</th></tr>\n")
			for _, c := range p.TopDenied {
				fmt.Fprintf(b, "<tr><td class=\"name\">%s</td><td>%d</td><td>%d</td><td>%d</td></tr>\n", esc(c.Caller), c.Requests, c.Denied, c.CapacityNeeded)
			}
			b.WriteString("</table>\n")
		}
		if len(p.Collateral) > 0 {
			b.WriteString("<p>Denied client addresses and who was behind them (many user agents or API keys behind one address: a NAT or a proxy).</p>\n")
			b.WriteString("<table>\n<tr><th>caller</th><th>requests</th><th>denied</th><th>capacity needed</th><th>user agents</th><th>API keys</th></tr>\n")
			for _, c := range p.Collateral {
				fmt.Fprintf(b, "<tr><td class=\"name\">%s</td><td>%d</td><td>%d</td><td>%d</td><td>%s</td><td>%s</td></tr>\n",
					esc(c.Caller), c.Requests, c.Denied, c.CapacityNeeded, atLeast(c.UserAgents), atLeast(c.APIKeys))
			}
			b.WriteString("</table>\n")
		}
	}
}

// Chart geometry: two panels side by side.
const (
	panelW, panelH = 460.0, 200.0
	pad            = 40.0
)

// chart draws one policy's SVG: requests (grey) and denials (red) per time
// bin on the left; callers per capacity_needed on the right, with the
// configured capacity as a vertical line.
func chart(b *strings.Builder, p *PolicyResult) {
	fmt.Fprintf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" data-policy=\"%s\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" font-size=\"11\">\n",
		html.EscapeString(p.Name), 2*panelW, panelH+pad, 2*panelW, panelH+pad)
	fmt.Fprintf(b, "<title>%s: requests and denials over time; capacity needed by callers</title>\n", html.EscapeString(p.Name))

	// Left: over time.
	s := p.series
	var top int64 = 1
	for _, n := range s.requests {
		top = max(top, n)
	}
	x0, y0, w, h := pad, 10.0, panelW-pad-10, panelH-30
	axes(b, x0, y0, w, h)
	yTicks(b, x0, y0, h, top)
	if n := len(s.requests); n > 0 {
		bw := w / float64(n)
		for i := range s.requests {
			rh := h * float64(s.requests[i]) / float64(top)
			dh := h * float64(s.denied[i]) / float64(top)
			x := x0 + float64(i)*bw
			fmt.Fprintf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#bbb\"/>\n", x, y0+h-rh, max(bw-0.5, 0.5), rh)
			if dh > 0 {
				fmt.Fprintf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#d33\"/>\n", x, y0+h-dh, max(bw-0.5, 0.5), dh)
			}
		}
		binWidth := time.Duration(s.width) * time.Microsecond
		for i := range 3 { // start, middle and end of the time axis
			at := s.origin + int64(i)*int64(n)*s.width/2
			fmt.Fprintf(b, "<text class=\"x-tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\">%s</text>\n", x0+float64(i)*w/2, y0+h+12,
				[...]string{"start", "middle", "end"}[i], clock(at))
		}
		fmt.Fprintf(b, "<text x=\"%.1f\" y=\"%.1f\">requests (grey) and denied (red) per %s, up to %d</text>\n", x0, y0+h+26, binWidth, top)
	} else {
		fmt.Fprintf(b, "<text x=\"%.1f\" y=\"%.1f\">no requests</text>\n", x0+10, y0+h/2)
	}

	// Right: capacity_needed histogram.
	x0 = panelW + pad
	axes(b, x0, y0, w, h)
	hi := max(p.Capacity, p.CapacityNeeded.Max, 1)
	const bins = 40
	width := max((hi+bins-1)/bins, 1) // tokens per bin
	counts := make([]int64, hi/width+1)
	for _, n := range p.needs {
		counts[min(n/width, int64(len(counts)-1))]++
	}
	var ctop int64 = 1
	for _, c := range counts {
		ctop = max(ctop, c)
	}
	yTicks(b, x0, y0, h, ctop)
	bw := w / float64(len(counts))
	for i := range 3 { // 0, half and the top of the capacity axis, in tokens
		v := int64(i) * int64(len(counts)) * width / 2
		fmt.Fprintf(b, "<text class=\"x-tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\">%d</text>\n", x0+float64(v)/float64(width)*bw, y0+h+12,
			[...]string{"start", "middle", "end"}[i], v)
	}
	for i, c := range counts {
		if c == 0 {
			continue
		}
		ch := h * float64(c) / float64(ctop)
		fmt.Fprintf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#48c\"/>\n", x0+float64(i)*bw, y0+h-ch, max(bw-0.5, 0.5), ch)
	}
	// Bar i holds needs [i·width, (i+1)·width): the line parts the callers
	// that fit (need ≤ capacity) from those that do not.
	cx := x0 + float64(p.Capacity+1)/float64(width)*bw
	fmt.Fprintf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#d33\" stroke-width=\"2\"/>\n", cx, y0, cx, y0+h)
	fmt.Fprintf(b, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#d33\">capacity %d</text>\n", cx+3, y0+10, p.Capacity)
	fmt.Fprintf(b, "<text x=\"%.1f\" y=\"%.1f\">callers by capacity needed (0 to %d tokens, %d a bar), up to %d</text>\n", x0, y0+h+26, hi, width, ctop)
	b.WriteString("</svg>\n")
}

// clock renders a time of day (UTC) for an axis.
func clock(us int64) string { return time.UnixMicro(us).UTC().Format("15:04:05") }

// yTicks labels a panel's vertical axis at 0, half and top (the count the
// tallest bar reaches), with a tick mark at each.
func yTicks(b *strings.Builder, x, y, h float64, top int64) {
	for i, v := range [...]int64{0, top / 2, top} {
		ty := y + h - h*float64(v)/float64(top)
		if i == 1 && (v == 0 || v == top) {
			continue // top 1: no half
		}
		fmt.Fprintf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n", x-4, ty, x, ty)
		fmt.Fprintf(b, "<text class=\"y-tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%d</text>\n", x-6, ty+4, v)
	}
}

func axes(b *strings.Builder, x, y, w, h float64) {
	fmt.Fprintf(b, "<polyline points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f\" fill=\"none\" stroke=\"#444\"/>\n", x, y, x, y+h, x+w, y+h)
}
