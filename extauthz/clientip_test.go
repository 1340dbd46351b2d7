package extauthz

import (
	"encoding/json"
	"net/netip"
	"os"
	"strings"
	"testing"
)

func viewWith(source string, headers map[string]string) *View {
	return NewView(checkRequest(source, headers))
}

func TestClientIPFollowsEnvoysTrustedHopRule(t *testing.T) {
	for _, tc := range []struct {
		name    string
		hops    int
		source  string
		xff     string
		want    string
		extAddr bool
		extHdr  string
	}{
		{name: "no proxies: the peer is the client", hops: 0, source: "203.0.113.7", want: "203.0.113.7/32"},
		{name: "edge Envoy appended the peer; with 0 hops that peer is the client", hops: 0, source: "203.0.113.7", xff: "6.6.6.6,203.0.113.7", want: "203.0.113.7/32"},
		{name: "one trusted hop picks the second from the right", hops: 1, source: "10.0.0.5", xff: "6.6.6.6, 198.51.100.23,10.0.0.5", want: "198.51.100.23/32"},
		{name: "two trusted hops (fixture chain)", hops: 2, source: "10.0.0.5", xff: "198.51.100.23, 192.0.2.10,10.0.0.5", want: "198.51.100.23/32"},
		{name: "a spoofed leftmost entry is never chosen", hops: 1, source: "10.0.0.5", xff: "1.2.3.4, 5.6.7.8, 198.51.100.23,10.0.0.5", want: "198.51.100.23/32"},
		{name: "too few entries fall back to the source", hops: 3, source: "10.0.0.5", xff: "198.51.100.23,10.0.0.5", want: "10.0.0.5/32"},
		{name: "a garbage entry falls back to the source", hops: 1, source: "10.0.0.5", xff: "x, not-an-ip,10.0.0.5", want: "10.0.0.5/32"},
		{name: "an empty header falls back to the source", hops: 1, source: "10.0.0.5", xff: " , ", want: "10.0.0.5/32"},
		// Envoy parses an entry as a bare address only (Utility::getLastAddressFromXFF,
		// source/common/http/utility.cc): with a port it is no address, and the source decides.
		{name: "a bracketed entry with a port is not an address", hops: 1, source: "10.0.0.5", xff: "[2001:db8::1]:443, 10.0.0.5", want: "10.0.0.5/32"},
		{name: "an IPv4 entry with a port is not an address", hops: 1, source: "10.0.0.5", xff: "198.51.100.23:5555, 10.0.0.5", want: "10.0.0.5/32"},
		{name: "a bare IPv6 entry", hops: 1, source: "10.0.0.5", xff: "2001:db8::1, 10.0.0.5", want: "2001:db8::/64"},
		{name: "IPv6 clients are bucketed by /64", hops: 0, source: "2001:db8:1:2:aaaa::1", want: "2001:db8:1:2::/64"},
		{name: "IPv4-mapped IPv6 reads as IPv4", hops: 0, source: "::ffff:198.51.100.9", want: "198.51.100.9/32"},
		{name: "no address at all", hops: 0, source: "", want: "invalid Prefix"},
		{name: "x-envoy-external-address is ignored unless trusted", hops: 0, source: "203.0.113.7", extHdr: "1.1.1.1", want: "203.0.113.7/32"},
		{name: "x-envoy-external-address when trusted", hops: 0, source: "10.0.0.5", extAddr: true, extHdr: "198.51.100.23", want: "198.51.100.23/32"},
		{name: "a forged external address that is not an IP is ignored", hops: 0, source: "10.0.0.5", extAddr: true, extHdr: "evil", want: "10.0.0.5/32"},
		{name: "an external address with a port is not an address", hops: 0, source: "10.0.0.5", extAddr: true, extHdr: "198.51.100.23:80", want: "10.0.0.5/32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := map[string]string{}
			if tc.xff != "" {
				h["x-forwarded-for"] = tc.xff
			}
			if tc.extHdr != "" {
				h["x-envoy-external-address"] = tc.extHdr
			}
			c := ClientIP{TrustedHops: tc.hops, UseExternalAddress: tc.extAddr, IPv4Prefix: 32, IPv6Prefix: 64}
			if got := c.Resolve(viewWith(tc.source, h)).String(); got != tc.want {
				t.Errorf("client = %s, want %s", got, tc.want)
			}
		})
	}
}

// With xff_trusted_cidrs, Envoy's xff original IP detection
// (XffIPDetection::detect in
// source/extensions/http/original_ip_detection/xff/xff.cc) counts the header
// only from a trusted peer and takes Utility::getLastNonTrustedAddressFromXFF
// (source/common/http/utility.cc): the rightmost untrusted entry; the
// leftmost entry when every entry is trusted; no address when an entry is
// not one or there are more than 20 entries (Envoy then uses the peer).
func TestClientIPWithTrustedCIDRs(t *testing.T) {
	c := ClientIP{TrustedCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.0/24")}, IPv4Prefix: 32, IPv6Prefix: 64}
	many := strings.Repeat("10.9.9.9,", MaxTrustedCIDRXFFEntries) + "198.51.100.23"
	for _, tc := range []struct{ source, xff, want string }{
		{"10.0.0.5", "6.6.6.6, 198.51.100.23, 192.0.2.10, 10.1.1.1", "198.51.100.23/32"},
		{"10.0.0.5", "10.1.1.1, 10.2.2.2", "10.1.1.1/32"},            // every entry trusted: the leftmost
		{"10.0.0.5", " 192.0.2.77 ", "192.0.2.77/32"},                // one trusted entry: itself
		{"203.0.113.9", "1.2.3.4", "203.0.113.9/32"},                 // an untrusted peer's header counts for nothing
		{"10.0.0.5", "198.51.100.23, junk, 10.1.1.1", "10.0.0.5/32"}, // an entry that is no address: the peer
		{"10.0.0.5", "", "10.0.0.5/32"},
		{"10.0.0.5", many[len("10.9.9.9,"):], "198.51.100.23/32"}, // 20 entries are read
		{"10.0.0.5", many, "10.0.0.5/32"},                         // 21 are refused
	} {
		if got := c.Resolve(viewWith(tc.source, map[string]string{"x-forwarded-for": tc.xff})).String(); got != tc.want {
			t.Errorf("source %s xff %q: client %s, want %s", tc.source, tc.xff, got, tc.want)
		}
	}
}

// TestClientIPMatchesEnvoysXFFVectors replays the X-Forwarded-For cases of
// Envoy's own unit test (test/common/http/utility_test.cc,
// TEST(HttpUtility, getLastAddressFromXFF), for Utility::getLastAddressFromXFF
// in source/common/http/utility.cc), plus entries with ports, which
// Network::Utility::parseInternetAddressNoThrow does not read as addresses.
// A null client is Envoy falling back to the downstream peer.
func TestClientIPMatchesEnvoysXFFVectors(t *testing.T) {
	var vectors struct {
		XFF struct {
			Cases []struct {
				XFF    string  `json:"xff"`
				Skip   int     `json:"skip"`
				Client *string `json:"client"`
			} `json:"cases"`
		} `json:"xff_last_address"`
	}
	b, err := os.ReadFile("testdata/envoy/envoy-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &vectors); err != nil {
		t.Fatal(err)
	}
	if len(vectors.XFF.Cases) < 10 {
		t.Fatalf("only %d XFF vectors read", len(vectors.XFF.Cases))
	}
	const peer = "203.0.113.250"
	for _, tc := range vectors.XFF.Cases {
		c := ClientIP{TrustedHops: tc.Skip, IPv4Prefix: 32, IPv6Prefix: 128}
		h := map[string]string{}
		if tc.XFF != "" {
			h["x-forwarded-for"] = tc.XFF
		}
		want := peer
		if tc.Client != nil {
			want = *tc.Client
		}
		got := c.Resolve(viewWith(peer, h)).Addr().String()
		if got != want {
			t.Errorf("xff %q, %d trusted hops: client %s, Envoy's %s", tc.XFF, tc.Skip, got, want)
		}
	}
}
