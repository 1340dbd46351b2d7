package rls

import "github.com/floodgate/floodgate/limiter"

// Chain is the limit one descriptor of entries meets in domain, with no
// limit of its own, and the bucket it is counted in (Name, ID and Limit
// set; Cost and Kind left to the caller), exactly as Plan plans it: nil
// and the zero Request where no limit applies. Envoy's rate limit quota
// service divides these buckets (a bucket_id's pairs, sorted by key, are
// the chain), so a report charged to one is charged to the bucket the
// rate limit service decides the same chain by.
func (c *Limits) Chain(domain string, entries []Entry, hash Hasher) (*Limit, limiter.Request) {
	lim := c.Select(domain, entries)
	if lim == nil {
		return nil, limiter.Request{}
	}
	return lim, limiter.Request{Name: bucketPrefix + domain + "/" + lim.Key, ID: hash("rls:"+domain, descriptorText(entries)), Limit: lim.bucket}
}

// MetricName is the name a limit is counted under: its name, else its
// place in the tree (floodgate_rls_decisions_total's limit label).
func MetricName(lim *Limit) string { return metricName(lim) }

// Label labels a descriptor of entries meeting lim (nil: a request's own
// limit), its bucket identity id, for an operator, as /debug/limited does:
// the entries' keys (with the values the configuration names) and the one
// address a client brings, "-", or id.
func Label(entries []Entry, lim *Limit, id string) (key, caller string) {
	n := callerName{entries: entries, lim: lim, id: id}
	return n.Name()
}
