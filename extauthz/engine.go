package extauthz

import (
	"fmt"
	"net/netip"
	"strings"
)

// Options are the settings shared by every policy.
type Options struct {
	ClientIP ClientIPSpec
	// Headers lists the RateLimit header families to send: "legacy"
	// (RateLimit-Limit/-Remaining/-Reset) and/or "structured"
	// (RateLimit-Policy and RateLimit, draft-ietf-httpapi-ratelimit-headers).
	// Empty means both.
	Headers []string
	// HashSecret keys the hash that turns identities into bucket keys.
	HashSecret []byte
}

// ClientIPSpec configures ClientIP (the `client_ip:` block).
type ClientIPSpec struct {
	TrustedHops        int      `yaml:"trusted_hops"`
	TrustedCIDRs       []string `yaml:"trusted_cidrs"`
	UseExternalAddress bool     `yaml:"use_external_address"`
	IPv4Prefix         *int     `yaml:"ipv4_prefix"` // default 32
	IPv6Prefix         *int     `yaml:"ipv6_prefix"` // default 64
}

// Engine is a compiled configuration: policies in order plus the shared
// options. It is immutable, so a reload swaps one Engine for another while
// decisions in flight finish on the old one.
type Engine struct {
	Policies   []*Policy
	clientIP   ClientIP
	legacy     bool
	structured bool
	hasher     *hasher
	anyTCP     bool
}

// Compile checks specs and opts and builds an Engine. Its error is a
// fielderr.List: every problem found, each at a path like
// "policies[1].key[0]".
func Compile(specs []PolicySpec, opts Options) (*Engine, error) {
	var el errorList
	e := &Engine{hasher: newHasher(opts.HashSecret)}
	e.clientIP = compileClientIP(opts.ClientIP, &el)
	if len(opts.Headers) == 0 {
		e.legacy, e.structured = true, true
	}
	for i, h := range opts.Headers {
		switch h {
		case "legacy":
			e.legacy = true
		case "structured":
			e.structured = true
		default:
			el.add(fmt.Sprintf("headers[%d]", i), "unknown header family %q (want legacy or structured)", h)
		}
	}
	seen := map[string]int{}
	for i := range specs {
		p := compilePolicy(&specs[i], fmt.Sprintf("policies[%d]", i), &el)
		if j, dup := seen[specs[i].Name]; dup && specs[i].Name != "" {
			el.add(fmt.Sprintf("policies[%d].name", i), "duplicate policy name %q (also policies[%d])", specs[i].Name, j)
		}
		seen[specs[i].Name] = i
		if p != nil {
			e.Policies = append(e.Policies, p)
			e.anyTCP = e.anyTCP || p.match.tcp
		}
	}
	if err := el.err(); err != nil {
		return nil, err
	}
	return e, nil
}

func compileClientIP(s ClientIPSpec, el *errorList) ClientIP {
	c := ClientIP{TrustedHops: s.TrustedHops, UseExternalAddress: s.UseExternalAddress, IPv4Prefix: 32, IPv6Prefix: 64}
	if s.TrustedHops < 0 || s.TrustedHops >= MaxXFFEntries {
		el.add("client_ip.trusted_hops", "must be between 0 and %d (got %d)", MaxXFFEntries-1, s.TrustedHops)
	}
	for i, cidr := range s.TrustedCIDRs {
		p, err := netip.ParsePrefix(strings.TrimSpace(cidr))
		if err != nil {
			if a, err2 := netip.ParseAddr(strings.TrimSpace(cidr)); err2 == nil {
				p = netip.PrefixFrom(a, a.BitLen())
			} else {
				el.add(fmt.Sprintf("client_ip.trusted_cidrs[%d]", i), "not a CIDR: %q", cidr)
				continue
			}
		}
		c.TrustedCIDRs = append(c.TrustedCIDRs, p.Masked())
	}
	if len(s.TrustedCIDRs) > 0 && s.TrustedHops > 0 {
		el.add("client_ip.trusted_cidrs", "set either trusted_hops or trusted_cidrs, not both (as Envoy's xff_num_trusted_hops and xff_trusted_cidrs)")
	}
	if s.IPv4Prefix != nil {
		if *s.IPv4Prefix < 1 || *s.IPv4Prefix > 32 {
			el.add("client_ip.ipv4_prefix", "must be between 1 and 32 (got %d)", *s.IPv4Prefix)
		}
		c.IPv4Prefix = *s.IPv4Prefix
	}
	if s.IPv6Prefix != nil {
		if *s.IPv6Prefix < 1 || *s.IPv6Prefix > 128 {
			el.add("client_ip.ipv6_prefix", "must be between 1 and 128 (got %d)", *s.IPv6Prefix)
		}
		c.IPv6Prefix = *s.IPv6Prefix
	}
	return c
}

// WithTrustedHops returns e with client_ip's trusted_hops set to n and
// everything else shared: the same policies (the same buckets, counters
// and report), for a door whose requests carry one more proxy's address in
// X-Forwarded-For (the HTTP door behind Envoy, whose HTTP client appends
// its own). n must be within [0, MaxXFFEntries); under trusted CIDRs,
// which skip the proxies by their ranges, it changes nothing.
func (e *Engine) WithTrustedHops(n int) *Engine {
	if n == e.clientIP.TrustedHops || len(e.clientIP.TrustedCIDRs) > 0 {
		return e
	}
	if n < 0 || n >= MaxXFFEntries {
		panic(fmt.Sprintf("extauthz: WithTrustedHops(%d): must be within [0, %d)", n, MaxXFFEntries))
	}
	c := *e
	c.clientIP.TrustedHops = n
	return &c
}
