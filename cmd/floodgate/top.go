package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/floodgate/floodgate/internal/limited"
)

// topReport is what `floodgate top --json` prints: the replicas asked and
// their reports merged (the counts add up), in /debug/limited's shape.
type topReport struct {
	Replicas []string `json:"replicas"`
	limited.Report
}

// top shows who is being limited, from every replica's /debug/limited
// merged into one table, refreshed like top(1), or once.
func top(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("top", stderr)
	admins := fs.String("admin", "127.0.0.1:9192", "admin addresses (HOST:PORT), comma-separated: the replicas whose views are merged")
	once := fs.Bool("once", false, "print the table once and exit")
	asJSON := fs.Bool("json", false, "print the merged report as JSON, once, and exit")
	every := fs.Duration("interval", 2*time.Second, "time between refreshes")
	rows := fs.Int("rows", 10, "callers shown per policy")
	timeout := fs.Duration("timeout", 2*time.Second, "how long to wait for each replica")
	everyAddr := fs.Bool("every-address", false, "ask every address each --admin name resolves to: a headless Service's name is every replica")
	if !parseArgs(fs, args) {
		return 2
	}
	urls, err := adminURLs(*admins)
	if err != nil {
		fmt.Fprintln(stderr, "floodgate top:", err)
		return 2
	}
	if *rows < 1 || *every <= 0 || *timeout <= 0 {
		fmt.Fprintln(stderr, "floodgate top: --rows, --interval and --timeout must be > 0")
		return 2
	}
	client := &http.Client{Timeout: *timeout}
	if *asJSON || *once {
		rep, errs := gather(ctx, client, resolve(ctx, urls, *everyAddr, net.DefaultResolver.LookupHost))
		for _, err := range errs {
			fmt.Fprintln(stderr, "floodgate top:", err)
		}
		if len(rep.Replicas) == 0 {
			return 1
		}
		rep.Trim(*rows)
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			enc.Encode(rep)
		} else {
			printTop(stdout, rep, nil)
		}
		if len(errs) > 0 {
			return 1
		}
		return 0
	}
	clear := isTerminal(stdout)
	for {
		rep, errs := gather(ctx, client, resolve(ctx, urls, *everyAddr, net.DefaultResolver.LookupHost))
		rep.Trim(*rows)
		if clear {
			io.WriteString(stdout, "\x1b[H\x1b[2J")
		}
		printTop(stdout, rep, errs)
		if !clear {
			fmt.Fprintln(stdout)
		}
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(*every):
		}
	}
}

// adminURLs turns the --admin list into /debug/limited URLs.
func adminURLs(list string) ([]string, error) {
	var urls []string
	for _, a := range strings.Split(list, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		base := a
		if !strings.Contains(a, "://") {
			if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
				return nil, fmt.Errorf("--admin %q: want HOST:PORT (the listen.admin address), as in 127.0.0.1:9192", a)
			}
			base = "http://" + a
		}
		u, err := url.Parse(base)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("--admin %q: want HOST:PORT or an http(s) URL", a)
		}
		u.Path, u.RawQuery = "/debug/limited", "format=json"
		urls = append(urls, u.String())
	}
	if len(urls) == 0 {
		return nil, errors.New("--admin needs at least one HOST:PORT")
	}
	return urls, nil
}

// target is one replica to ask: its URL, or why there is none.
type target struct {
	url string
	err error
}

// resolve turns the --admin URLs into the replicas to ask: as given, or
// with every, one per address each host name resolves to (looked up anew
// on each refresh, as pods come and go).
func resolve(ctx context.Context, urls []string, every bool, lookup func(context.Context, string) ([]string, error)) []target {
	var out []target
	for _, u := range urls {
		p, _ := url.Parse(u)
		host, port := p.Hostname(), p.Port()
		if !every || net.ParseIP(host) != nil {
			out = append(out, target{url: u})
			continue
		}
		addrs, err := lookup(ctx, host)
		if err != nil || len(addrs) == 0 {
			out = append(out, target{url: u, err: fmt.Errorf("%s resolves to no address: %v", host, err)})
			continue
		}
		slices.Sort(addrs)
		for _, a := range addrs {
			q := *p
			q.Host = net.JoinHostPort(a, port)
			out = append(out, target{url: q.String()})
		}
	}
	return out
}

// gather asks every replica at once and merges what they answer; errs
// names each replica that did not.
func gather(ctx context.Context, client *http.Client, targets []target) (topReport, []error) {
	reps := make([]limited.Report, len(targets))
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	for i, tg := range targets {
		if errs[i] = tg.err; tg.err != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			reps[i], errs[i] = fetchReport(ctx, client, tg.url)
		}()
	}
	wg.Wait()
	out := topReport{Replicas: []string{}, Report: limited.Report{Policies: []limited.PolicyReport{}, Shadow: []limited.PolicyReport{}}}
	var failed []error
	for i, tg := range targets {
		host := hostOf(tg.url)
		if errs[i] != nil {
			failed = append(failed, fmt.Errorf("%s: %v", host, errs[i]))
			continue
		}
		out.Replicas = append(out.Replicas, host)
		out.Merge(reps[i])
	}
	return out, failed
}

func fetchReport(ctx context.Context, client *http.Client, u string) (limited.Report, error) {
	var rep limited.Report
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return rep, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return rep, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return rep, err
	}
	if resp.StatusCode == http.StatusNotFound {
		return rep, errors.New("no /debug/limited here: is this a floodgate admin port, of a version that has it?")
	}
	if resp.StatusCode != http.StatusOK {
		return rep, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, &rep); err != nil {
		return rep, fmt.Errorf("not a /debug/limited report: %v", err)
	}
	return rep, nil
}

func hostOf(u string) string {
	if p, err := url.Parse(u); err == nil {
		return p.Host
	}
	return u
}

// printTop writes the merged report as a table: each policy, busiest first,
// with its denials, then its most denied callers.
func printTop(w io.Writer, rep topReport, errs []error) {
	replicas := "1 replica"
	if n := len(rep.Replicas); n != 1 {
		replicas = strconv.Itoa(n) + " replicas"
	}
	fmt.Fprintf(w, "floodgate top: the last %d s, %s: %s\n", rep.WindowSeconds, replicas, strings.Join(rep.Replicas, ", "))
	for _, err := range errs {
		fmt.Fprintf(w, "unreachable: %v\n", err)
	}
	if len(rep.Policies)+len(rep.Shadow) == 0 {
		fmt.Fprintln(w, "\nno decisions in the window")
		return
	}
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	section := func(title, denied string, ps []limited.PolicyReport) {
		if len(ps) == 0 {
			return
		}
		fmt.Fprintf(tw, "\n%s\tKEY\t%s\tALLOWED\n", title, denied)
		for _, p := range ps {
			fmt.Fprintf(tw, "%s\t\t%d\t\n", p.Name, p.Denied)
			for _, c := range p.Top {
				n := strconv.FormatInt(c.Denied, 10)
				if c.Overcount > 0 {
					n += " (≤" + strconv.FormatInt(c.Overcount, 10) + " over)"
				}
				key := c.Key
				if key == "" {
					key = "(none: shared bucket)"
				}
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\n", c.Caller, key, n, c.Allowed)
			}
		}
	}
	section("POLICY / CALLER", "DENIED", rep.Policies)
	section("SHADOW POLICY / CALLER", "WOULD DENY", rep.Shadow)
	tw.Flush()
	for _, line := range strings.SplitAfter(buf.String(), "\n") { // no padding at the ends of lines
		io.WriteString(w, strings.TrimRight(line, " \n")+strings.Repeat("\n", strings.Count(line, "\n")))
	}
}

// isTerminal reports whether w is a terminal, where top redraws in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
