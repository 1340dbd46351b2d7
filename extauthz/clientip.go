package extauthz

import (
	"net/netip"
	"strings"
)

// ClientIP decides which address is the client, exactly as Envoy does for
// its own trusted client address, so a caller cannot pick its bucket by
// writing X-Forwarded-For.
//
// With TrustedHops N (Envoy's xff_num_trusted_hops), the client is the
// (N+1)-th address from the right of X-Forwarded-For: an edge Envoy with
// use_remote_address has already appended the peer it saw, so with N = 0 that
// peer is the client. With TrustedCIDRs set instead (Envoy's
// xff_trusted_cidrs), the client is the rightmost address not inside them,
// or the leftmost address when all of them are inside.
// When X-Forwarded-For is too short or the chosen entry is not a bare IP
// address (an entry with a port, such as 198.51.100.7:8080 or
// [2001:db8::1]:443, is not one to Envoy either), the connection's source
// address is used. The leftmost entry, which the client
// writes, never decides on its own.
type ClientIP struct {
	TrustedHops int
	// TrustedCIDRs, when set, replaces the hop count.
	TrustedCIDRs []netip.Prefix
	// UseExternalAddress trusts x-envoy-external-address first. Envoy
	// writes that header only for a request it treats as external while
	// use_remote_address is on (an edge Envoy), and it does not remove a
	// copy the client sent in any other case: turn this on only behind an
	// edge Envoy that sets it. Off by default.
	UseExternalAddress bool
	// IPv4Prefix and IPv6Prefix group clients into one bucket per network:
	// by default /32 (one address) and /64 (one host can hold a whole /64).
	IPv4Prefix, IPv6Prefix int
}

// MaxXFFEntries bounds the X-Forwarded-For entries examined: a header of
// thousands of entries costs no more than this.
const MaxXFFEntries = 64

// Resolve returns the client's address for v, masked to its bucket prefix,
// or the zero Addr when neither the header nor the source holds an IP.
func (c *ClientIP) Resolve(v *View) netip.Prefix {
	if c.UseExternalAddress {
		if s, ok := v.Header("x-envoy-external-address"); ok {
			if a, ok := parseBareIP(s); ok {
				return c.mask(a)
			}
		}
	}
	xff, _ := v.Header("x-forwarded-for")
	if a, ok := c.fromXFF(xff, v.Source); ok {
		return c.mask(a)
	}
	if a, ok := parseIP(v.Source); ok {
		return c.mask(a)
	}
	return netip.Prefix{}
}

func (c *ClientIP) fromXFF(xff, source string) (netip.Addr, bool) {
	if len(c.TrustedCIDRs) > 0 {
		return c.lastUntrusted(xff, source)
	}
	rest := xff
	var entry string
	for i := 0; i <= c.TrustedHops; i++ {
		if rest == "" || i >= MaxXFFEntries {
			return netip.Addr{}, false
		}
		rest, entry = lastEntry(rest)
	}
	return parseBareIP(entry)
}

// MaxTrustedCIDRXFFEntries is Envoy's limit on X-Forwarded-For under
// xff_trusted_cidrs: a header of more entries names no client
// (MAX_ALLOWED_XFF_ENTRIES in Utility::getLastNonTrustedAddressFromXFF).
const MaxTrustedCIDRXFFEntries = 20

// lastUntrusted picks the client under TrustedCIDRs as Envoy's xff original
// IP detection does (XffIPDetection::detect, then
// Utility::getLastNonTrustedAddressFromXFF in source/common/http/utility.cc):
// only a trusted peer's header counts; from the right, the first entry not
// inside a trusted range is the client; an entry that is not a bare address
// ends the search with no client; when every entry is trusted, the leftmost
// one is the client; more than MaxTrustedCIDRXFFEntries entries name none.
func (c *ClientIP) lastUntrusted(xff, source string) (netip.Addr, bool) {
	if src, ok := parseIP(source); !ok || !c.trusted(src) {
		return netip.Addr{}, false
	}
	if xff == "" || strings.Count(xff, ",") >= MaxTrustedCIDRXFFEntries {
		return netip.Addr{}, false
	}
	var leftmost netip.Addr
	for rest := xff; rest != ""; {
		var entry string
		rest, entry = lastEntry(rest)
		a, ok := parseBareIP(entry)
		if !ok {
			return netip.Addr{}, false
		}
		if !c.trusted(a) {
			return a, true
		}
		leftmost = a
	}
	return leftmost, leftmost.IsValid()
}

func (c *ClientIP) trusted(a netip.Addr) bool {
	for _, p := range c.TrustedCIDRs {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// lastEntry splits off the rightmost comma-separated entry, trimmed.
func lastEntry(s string) (rest, entry string) {
	i := strings.LastIndexByte(s, ',')
	if i < 0 {
		return "", strings.TrimSpace(s)
	}
	return s[:i], strings.TrimSpace(s[i+1:])
}

// parseBareIP reads an X-Forwarded-For entry as Envoy does
// (Utility::getLastAddressFromXFF in source/common/http/utility.cc parses
// the entry with Network::Utility::parseInternetAddressNoThrow): an IPv4 or
// IPv6 address alone, no port, no brackets. IPv4-mapped IPv6 reads as IPv4;
// zones are dropped.
func parseBareIP(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if s == "" || len(s) > 64 {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// parseIP reads a socket address as a CheckRequest's peer may carry it:
// plain, bracketed, or with a port; IPv4-mapped IPv6 reads as IPv4; zones
// are dropped.
func parseIP(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if s == "" || len(s) > 64 {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		ap, err2 := netip.ParseAddrPort(s)
		if err2 != nil {
			if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
				a, err = netip.ParseAddr(s[1 : len(s)-1])
			}
			if err != nil {
				return netip.Addr{}, false
			}
		} else {
			a = ap.Addr()
		}
	}
	return a.Unmap().WithZone(""), true
}

func (c *ClientIP) mask(a netip.Addr) netip.Prefix {
	bits := c.IPv4Prefix
	if a.Is6() {
		bits = c.IPv6Prefix
	}
	if bits <= 0 || bits > a.BitLen() {
		bits = a.BitLen()
	}
	p, _ := a.Prefix(bits)
	return p
}
