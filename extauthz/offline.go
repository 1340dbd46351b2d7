package extauthz

import (
	"slices"
	"strings"
)

// What floodgate replay (internal/replay) needs beyond the decide path
// (decide.go) to report on a log: the callers in the clear, and what the
// policies read, so that it can tell an operator which log fields to add.

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
