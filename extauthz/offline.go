package extauthz

import (
	"context"
	"slices"
	"strings"

	"github.com/floodgate/floodgate/limiter"
)

// The offline seam: what Check does between the request view and the
// response, for a driver other than gRPC (floodgate replay decides logged
// requests with it). Plan is Check's plan step and Decide its store step, so
// a replayed request meets the same match, identity, cost and all-or-nothing
// rule as a served one.

// Bucket is one matched policy's share of a request: the policy and the
// bucket request Check hands the store for it.
type Bucket struct {
	Policy  *Policy
	Request limiter.Request
}

// Plan appends to out the buckets the request in v draws from, in policy
// order: every policy whose match fits and that found a key for it (or fell
// back to its shared bucket).
func (e *Engine) Plan(v *View, out []Bucket) []Bucket {
	if !v.HTTP && !e.anyTCP {
		return out
	}
	for _, p := range e.Policies {
		if r, ok := e.request(p, v); ok {
			out = append(out, Bucket{Policy: p, Request: r})
		}
	}
	return out
}

// Decider applies a plan to stores as Check does: the enforced policies'
// buckets in one all-or-nothing Take, the shadow policies' buckets in
// another of their own, which never denies the request. Its buffers are
// reused, so it is for one goroutine.
type Decider struct {
	Store limiter.Store
	// Shadow decides shadow policies (default: Store).
	Shadow limiter.Store

	reqs []limiter.Request
	res  []limiter.Result
	idx  []int
}

// Decide decides plan and writes each bucket's result to res (len(plan)), in
// plan order. allowed is whether the request passes (true when no enforced
// policy applies); shadowAllowed is whether the shadow policies' buckets
// could all pay (true when there are none). An error from the enforced
// Take is returned (nothing was taken); a shadow error leaves those results
// zero and shadowAllowed true, as Check only counts it.
func (d *Decider) Decide(ctx context.Context, plan []Bucket, res []limiter.Result) (allowed, shadowAllowed bool, err error) {
	allowed, shadowAllowed = true, true
	shadowStore := d.Shadow
	if shadowStore == nil {
		shadowStore = d.Store
	}
	for pass := 0; pass < 2; pass++ {
		shadow := pass == 1
		d.reqs, d.idx = d.reqs[:0], d.idx[:0]
		for i := range plan {
			if plan[i].Policy.Shadow == shadow {
				d.reqs, d.idx = append(d.reqs, plan[i].Request), append(d.idx, i)
			}
		}
		if len(d.reqs) == 0 {
			continue
		}
		if cap(d.res) < len(d.reqs) {
			d.res = make([]limiter.Result, len(d.reqs))
		}
		d.res = d.res[:len(d.reqs)]
		store := d.Store
		if shadow {
			store = shadowStore
		}
		ok, err := store.Take(ctx, d.reqs, d.res)
		if err != nil {
			if !shadow {
				return false, shadowAllowed, err
			}
			continue
		}
		for j, i := range d.idx {
			res[i] = d.res[j]
		}
		if shadow {
			shadowAllowed = ok
		} else {
			allowed = ok
		}
	}
	return allowed, shadowAllowed, nil
}

// Caller names the caller of v under p in the clear, for an operator's
// report on their own traffic: the key source that decided the bucket (the
// one identity chose) and its value. A client_ip value is the bucket's
// network: the address, or its prefix when ipv4_prefix/ipv6_prefix group
// several. source is "" for the shared bucket of requests without a key. A
// fingerprint, a digest of headers with no clear form, reads as its bucket
// identity (a hash). The values are keyValue's, as identity reads them.
func (e *Engine) Caller(p *Policy, v *View) (source, value string) {
	for i := range p.keys {
		k := &p.keys[i]
		switch val, ip := e.keyValue(p, k, v); {
		case ip.IsValid() && ip.IsSingleIP():
			return k.tag, ip.Addr().String()
		case ip.IsValid():
			return k.tag, ip.String()
		case val != "" && k.kind == srcFingerprint: // a digest of headers: no clear form
			return k.tag, e.hasher.id(k.tag, val)
		case val != "":
			return k.tag, val
		}
	}
	return "", ""
}

// KeyedByClientIP reports whether p's key list names client_ip.
func (p *Policy) KeyedByClientIP() bool {
	for _, k := range p.keys {
		if k.kind == srcClientIP {
			return true
		}
	}
	return false
}

// Inputs is what an engine's policies read from a request beyond its
// method, path, host and source address.
type Inputs struct {
	Headers []string // lower case, sorted
	Context []string // context_extensions keys, sorted
	// MetadataPaths is every metadata key's namespace and path, sorted.
	MetadataPaths []MetadataPath
	// Sources lists every key source as written (client_ip, header:NAME, ...).
	Sources []string
}

// Inputs returns what e's policies read: the headers their matches, keys,
// fingerprints and costs name (x-forwarded-for when a key is client_ip, and
// x-envoy-external-address when that is trusted), the context_extensions
// keys, the metadata keys' namespaces and paths, and the key sources.
func (e *Engine) Inputs() Inputs {
	hs, cs, ss := map[string]bool{}, map[string]bool{}, map[string]bool{}
	var paths []MetadataPath
	for _, p := range e.Policies {
		for _, h := range p.match.headers {
			hs[h.name] = true
		}
		for _, kv := range p.match.context {
			cs[kv[0]] = true
		}
		if p.costHeader != "" {
			hs[p.costHeader] = true
		}
		for _, k := range p.keys {
			ss[k.tag] = true
			switch k.kind {
			case srcHeader:
				hs[k.name] = true
			case srcClientIP:
				hs["x-forwarded-for"] = true
				if e.clientIP.UseExternalAddress {
					hs["x-envoy-external-address"] = true
				}
			case srcContext:
				cs[k.name] = true
			case srcMetadata:
				paths = append(paths, MetadataPath{Namespace: k.name, Path: k.path})
			case srcFingerprint:
				for _, h := range p.printHdrs {
					hs[h] = true
				}
			}
		}
	}
	slices.SortFunc(paths, func(a, b MetadataPath) int {
		return strings.Compare(a.Namespace+"\x00"+strings.Join(a.Path, "\x00"), b.Namespace+"\x00"+strings.Join(b.Path, "\x00"))
	})
	paths = slices.CompactFunc(paths, func(a, b MetadataPath) bool {
		return a.Namespace == b.Namespace && slices.Equal(a.Path, b.Path)
	})
	return Inputs{Headers: sorted(hs), Context: sorted(cs), MetadataPaths: paths, Sources: sorted(ss)}
}

// MetadataPath is one metadata key source: metadata:NAMESPACE:A.B reads
// Path [A B] of the dynamic metadata Namespace.
type MetadataPath struct {
	Namespace string
	Path      []string
}

func sorted(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
