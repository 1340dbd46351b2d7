package extauthz

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/floodgate/floodgate/limiter"
)

// Explained is one policy's part in a request, as Explain reads it: for an
// operator asking why a request is limited.
type Explained struct {
	Policy *Policy
	// Matched: the policy's match fits the request; when it does not,
	// Failed says which condition failed and with what.
	Matched bool
	Failed  string
	// Planned: the request draws from the policy's bucket (it matched and
	// found a key, or fell back to the shared bucket). A policy that
	// matched without a key under on_missing_key: skip is not planned.
	Planned bool
	// Source is the key source, as written, that named the bucket ("" for
	// the shared bucket); Request is the bucket's request as the decision
	// makes it, its ID the identity hashed as decisions hash it.
	Source  string
	Request limiter.Request
}

// Explain is every policy of e, in order, and what it makes of the request
// in v, spending nothing. It reads the request with the code Plan reads it
// with (the match's first failing condition, the identity and its source,
// the cost), so the policies it says are planned are those Plan plans,
// with the same requests.
func (e *Engine) Explain(v *View) []Explained {
	out := make([]Explained, 0, len(e.Policies))
	for _, p := range e.Policies {
		x := Explained{Policy: p}
		if c := p.match.miss(v); c.cond != fits {
			x.Failed = p.match.describe(c, v)
			out = append(out, x)
			continue
		}
		x.Matched = true
		id, src, ok := e.identityFrom(p, v)
		if !ok {
			x.Failed = "on_missing_key: skip, and none of its key sources (" + strings.Join(p.keyTags(), ", ") + ") has a value"
			out = append(out, x)
			continue
		}
		x.Planned = true
		if src >= 0 {
			x.Source = p.keys[src].tag
		}
		x.Request = limiter.Request{Name: p.Name, ID: id, Limit: p.Limit, Cost: p.costOf(v), Lease: p.Lease, Quota: p.Quota}
		out = append(out, x)
	}
	return out
}

// Policy is e's policy named name, nil when there is none.
func (e *Engine) Policy(name string) *Policy {
	for _, p := range e.Policies {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// KeySources are p's key sources as written, in order.
func (p *Policy) KeySources() []string { return p.keyTags() }

// BucketOf is the bucket request of policy p for a caller whose key source
// source (one of p's, as written; "" for its first) reads value: the
// identity hashed exactly as a decision hashes it, so an operator names a
// caller's bucket by what the caller sends. For client_ip, value is the
// client's address, grouped by client_ip.ipv4_prefix/ipv6_prefix as a
// decision groups it; a header value holding a comma names the bucket of
// requests that repeat the header, as a decision reads it. An empty value
// names the shared bucket of requests without a key (on_missing_key:
// shared). A fingerprint has no value to send: name its bucket by its
// identity instead.
func (e *Engine) BucketOf(p *Policy, source, value string) (limiter.Request, error) {
	r := limiter.Request{Name: p.Name, Limit: p.Limit, Cost: p.cost, Lease: p.Lease, Quota: p.Quota}
	if value == "" {
		if p.skipMissed {
			return r, fmt.Errorf("policy %s has no shared bucket (on_missing_key: skip): give a key", p.Name)
		}
		r.ID = sharedID
		return r, nil
	}
	var k *keySource
	for i := range p.keys {
		if source == "" || p.keys[i].tag == source {
			k = &p.keys[i]
			break
		}
	}
	if k == nil {
		return r, fmt.Errorf("policy %s has no key source %q (its key sources: %s)", p.Name, source, strings.Join(p.keyTags(), ", "))
	}
	switch k.kind {
	case srcClientIP:
		a, ok := parseIP(value)
		if !ok {
			return r, fmt.Errorf("key source client_ip of policy %s takes an IP address (got %q)", p.Name, value)
		}
		r.ID = e.hasher.idPrefix(k.tag, e.clientIP.mask(a))
	case srcFingerprint:
		return r, fmt.Errorf("key source fingerprint of policy %s hashes several headers: name its bucket by identity (floodgate explain shows it)", p.Name)
	case srcHeader:
		if strings.IndexByte(value, ',') >= 0 {
			r.ID = k.repeatedID
		} else {
			r.ID = e.hasher.id(k.tag, strings.TrimSpace(value))
		}
	default:
		r.ID = e.hasher.id(k.tag, value)
	}
	return r, nil
}

// NewHTTPView reads r, an authorization request a proxy sent the HTTP
// door, as the door reads it under o: what Explain takes for that door.
func NewHTTPView(r *http.Request, o HTTPRequestOptions) *View {
	v := &View{}
	c := o.canonical()
	v.resetHTTP(r, &c)
	return v
}
