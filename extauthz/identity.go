package extauthz

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"hash"
	"net/netip"
	"strconv"
	"strings"
	"sync"
)

type sourceKind uint8

const (
	srcHeader sourceKind = iota + 1
	srcClientIP
	srcContext
	srcMetadata
	srcFingerprint
	srcPrincipal
)

// keySource is one compiled entry of a policy's `key` list.
type keySource struct {
	kind sourceKind
	name string   // header or context name, metadata namespace
	path []string // metadata path
	tag  string   // the source as written: hashed with the value, so equal
	// values from different sources never share a bucket
	repeatedID string // a header source's bucket for a repeated header (repeatedPrefix)
}

func parseKeySource(s string) (keySource, error) {
	s = strings.TrimSpace(s)
	kind, arg, _ := strings.Cut(s, ":")
	switch kind {
	case "client_ip", "fingerprint", "source_principal":
		if arg != "" {
			return keySource{}, errors.New(kind + " takes no argument (got " + strconv.Quote(s) + ")")
		}
		k := srcClientIP
		switch kind {
		case "fingerprint":
			k = srcFingerprint
		case "source_principal":
			k = srcPrincipal
		}
		return keySource{kind: k, tag: kind}, nil
	case "header":
		name := strings.ToLower(arg)
		if !headerName.MatchString(name) {
			return keySource{}, errors.New("header source needs a header name, as in header:x-api-key (got " + strconv.Quote(s) + ")")
		}
		tag := "header:" + name
		return keySource{kind: srcHeader, name: name, tag: tag, repeatedID: repeatedPrefix + tag}, nil
	case "context":
		if arg == "" {
			return keySource{}, errors.New("context source needs a context_extensions key, as in context:tenant")
		}
		return keySource{kind: srcContext, name: arg, tag: s}, nil
	case "metadata":
		ns, path, ok := strings.Cut(arg, ":")
		if !ok || ns == "" || path == "" || strings.Contains(path, "..") || strings.HasPrefix(path, ".") || strings.HasSuffix(path, ".") {
			return keySource{}, errors.New("metadata source is metadata:NAMESPACE:PATH, as in metadata:envoy.filters.http.jwt_authn:jwt_payload.sub (got " + strconv.Quote(s) + ")")
		}
		return keySource{kind: srcMetadata, name: ns, path: strings.Split(path, "."), tag: s}, nil
	}
	return keySource{}, errors.New("unknown key source " + strconv.Quote(s) + " (want header:NAME, client_ip, context:NAME, metadata:NAMESPACE:PATH, fingerprint or source_principal)")
}

// sharedID is the bucket of requests for which no key source yields a value
// under on_missing_key: shared.
const sharedID = "-"

// repeatedPrefix begins the identity of the bucket every request shares
// whose deciding key header was sent more than once: repeatedPrefix and the
// source's tag ("+header:x-api-key"). A client that sends an identity
// header twice means two identities, and the upstream behind Envoy picks
// one of them (Go's Header.Get the first, many frameworks the last): were
// the joined value hashed as one, rotating the other copy would mint a
// fresh bucket per request while the upstream still authenticated the
// fixed one. So every such request of a policy draws from this one
// bucket instead, whatever the values and their order. Envoy joins a
// repeated header's values with "," in `headers`, Floodgate joins
// header_map's entries and the HTTP door's lines alike (View.Header), so a
// comma in the value is the sign in every mode; a key header whose single
// value holds a comma reads as repeated too. A hashed identity is 22
// characters of base64url, which has no "+": the two cannot meet.
const repeatedPrefix = "+"

// identity returns the bucket identity of the request under p, or
// ok = false when p does not apply (no value and on_missing_key: skip).
func (e *Engine) identity(p *Policy, v *View) (string, bool) {
	id, _, ok := e.identityFrom(p, v)
	return id, ok
}

// identityFrom is identity and the index of the key source that gave it
// (-1 for the shared bucket, or when p does not apply): Explain names it.
func (e *Engine) identityFrom(p *Policy, v *View) (id string, src int, ok bool) {
	for i := range p.keys {
		k := &p.keys[i]
		switch val, ip := e.keyValue(p, k, v); {
		case ip.IsValid():
			return e.hasher.idPrefix(k.tag, ip), i, true
		case val == repeatedValue:
			return k.repeatedID, i, true
		case val != "":
			return e.hasher.id(k.tag, val), i, true
		}
	}
	if p.skipMissed {
		return "", -1, false
	}
	return sharedID, -1, true
}

// repeatedValue is what keyValue reads for a header sent more than once
// (see repeatedPrefix). No header value can equal it: Envoy refuses a NUL
// in a header, and so does net/http.
const repeatedValue = "\x00repeated"

// keyValue is what key source k reads from v: for client_ip the client's
// network (ip valid; invalid when there is no usable address), for a
// header sent more than once repeatedValue, for every other source its
// value ("" when absent). identity hashes it into a
// bucket identity; Caller names it in the clear.
func (e *Engine) keyValue(p *Policy, k *keySource, v *View) (val string, ip netip.Prefix) {
	switch k.kind {
	case srcHeader:
		val, _ = v.Header(k.name)
		if strings.IndexByte(val, ',') >= 0 {
			return repeatedValue, ip
		}
		val = strings.TrimSpace(val)
	case srcClientIP:
		ip = e.clientIP.Resolve(v)
	case srcContext:
		val, _ = v.Context(k.name)
	case srcMetadata:
		val, _ = v.Metadata(k.name, k.path)
	case srcFingerprint:
		val = fingerprint(v, p.printHdrs)
	case srcPrincipal:
		val = v.Principal
	}
	return val, ip
}

// fingerprint joins the named headers' values; empty when none is present.
func fingerprint(v *View, names []string) string {
	var b strings.Builder
	any := false
	for _, n := range names {
		val, ok := v.Header(n)
		any = any || ok
		b.WriteString(val)
		b.WriteByte(0)
	}
	if !any {
		return ""
	}
	return b.String()
}

// hasher turns (source, value) into a bucket identity: 128 bits of
// HMAC-SHA256 under the configured secret, base64url (22 characters). API
// keys and tokens therefore never reach Redis, logs or metrics in the clear,
// and without the secret the keys in Redis cannot be brute-forced back.
type hasher struct {
	pool sync.Pool
}

func newHasher(secret []byte) *hasher {
	key := append([]byte("floodgate identity v1\x00"), secret...)
	h := &hasher{}
	h.pool.New = func() any { return &hmacState{mac: hmac.New(sha256.New, key)} }
	return h
}

type hmacState struct {
	mac hash.Hash
	sum [sha256.Size]byte
	out [22]byte
	in  []byte // tag, 0, value: one Write, no conversion allocating
}

// id hashes the whole of val: two values that differ anywhere are two
// buckets. Its length is bounded by the request's (listen.max_request_bytes),
// and hashing is linear in it.
func (h *hasher) id(tag, val string) string {
	st := h.pool.Get().(*hmacState)
	st.in = append(append(append(st.in[:0], tag...), 0), val...)
	return h.sum(st)
}

// idPrefix is id(tag, p.String()) without rendering the string first.
func (h *hasher) idPrefix(tag string, p netip.Prefix) string {
	st := h.pool.Get().(*hmacState)
	st.in = p.AppendTo(append(append(st.in[:0], tag...), 0))
	return h.sum(st)
}

// sum hashes st.in and returns st to the pool.
func (h *hasher) sum(st *hmacState) string {
	st.mac.Reset()
	st.mac.Write(st.in)
	sum := st.mac.Sum(st.sum[:0])
	base64.RawURLEncoding.Encode(st.out[:], sum[:16])
	s := string(st.out[:])
	h.pool.Put(st)
	return s
}

// HashIdentity is the bucket identity Floodgate gives value read from
// source under e's identity hash secret: what a front end other than Check
// (the rate limit service's descriptors) uses, so that no value reaches the
// store or the logs in the clear.
func (e *Engine) HashIdentity(source, value string) string { return e.hasher.id(source, value) }

// Caller names the caller of v under p in the clear, for an operator's
// report on their own traffic (floodgate replay): the key source that
// decided the bucket (the one identity chose) and its value. source is ""
// for the shared bucket of requests without a key.
func (e *Engine) Caller(p *Policy, v *View) (source, value string) { return e.caller(p, v, true) }

// caller names the key source that decided p's bucket for v and a label
// for its value: for client_ip the bucket's network (the address, or its
// prefix when ipv4_prefix/ipv6_prefix group several); for a fingerprint, a
// digest of headers with no clear form, the bucket identity (a keyed
// hash); for a header, its value when inClear, else the bucket identity
// too, since headers hold API keys and tokens; for context, metadata and
// source_principal, which Envoy sets and the client does not hold as a
// secret, the value. ("", "") for the shared bucket. The values are
// keyValue's, as identity reads them.
func (e *Engine) caller(p *Policy, v *View, inClear bool) (source, value string) {
	for i := range p.keys {
		k := &p.keys[i]
		switch val, ip := e.keyValue(p, k, v); {
		case ip.IsValid() && ip.IsSingleIP():
			return k.tag, ip.Addr().String()
		case ip.IsValid():
			return k.tag, ip.String()
		case val == "":
			continue
		case val == repeatedValue:
			return k.tag, k.repeatedID
		case k.kind == srcFingerprint || (k.kind == srcHeader && !inClear):
			return k.tag, e.hasher.id(k.tag, val)
		default:
			return k.tag, val
		}
	}
	return "", ""
}
