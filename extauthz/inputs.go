package extauthz

import (
	"slices"
	"strings"
)

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
