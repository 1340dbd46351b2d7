package replay

import (
	"errors"
	"fmt"
	"hash/maphash"
	"strings"
	"time"
	"unsafe"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/valyala/fastjson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/floodgate/floodgate/extauthz"
)

// entry is one log line, parsed and planned: everything the in-order stage
// needs, and nothing that refers to the line's bytes.
type entry struct {
	line int64  // 1-based
	at   int64  // start_time, microseconds since the Unix epoch
	err  string // why the line was skipped; "" for a good line
	// plan is the buckets the request draws from (extauthz.Engine.Plan);
	// callers[i] names the caller of plan's bucket i in the clear
	// ("client_ip 203.0.113.5").
	plan    extauthz.Plan
	callers []caller
	// ids[i] is a 64-bit keyed hash of bucket i's identity: the
	// caller tables' key (a collision among n callers has probability about
	// n²/2⁶⁵, as for limiter/memory's own keys).
	ids     []uint64
	ua, key uint64 // hashes of the user agent and the API key, 0 when absent
}

// caller is a bucket's caller as a report shows it.
type caller struct {
	source, value string
}

// parser turns log lines into entries. It reuses one CheckRequest, so a
// line becomes exactly the view a CheckRequest would (extauthz.View.Reset
// reads it), and it is for one goroutine.
type parser struct {
	engine  *extauthz.Engine
	keyHdrs []string // header key sources: the API keys of the collateral report
	seed    maphash.Seed

	p       fastjson.Parser
	req     authv3.CheckRequest
	http    authv3.AttributeContext_HttpRequest
	sock    corev3.SocketAddress
	headers map[string]string
	view    extauthz.View
	plan    extauthz.Plan
	// names caches the callers this parser has named, by identity hash:
	// a caller is named once, not on each of its lines.
	names map[uint64]caller
}

// maxNames bounds a parser's cache of caller names.
const maxNames = 1 << 16

func newParser(e *extauthz.Engine, keyHdrs []string, seed maphash.Seed) *parser {
	ps := &parser{engine: e, keyHdrs: keyHdrs, seed: seed, headers: map[string]string{}, names: map[uint64]caller{}}
	ps.req.Attributes = &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{
			Address: &corev3.Address_SocketAddress{SocketAddress: &ps.sock}}},
		Request: &authv3.AttributeContext_Request{Http: &ps.http},
	}
	return ps
}

// parse reads line b into e. plan and callers are appended to the batch's
// shared storage, which parse returns grown.
func (ps *parser) parse(b []byte, e *entry, st *batchStore) {
	if err := ps.read(b, e); err != nil {
		e.err = err.Error()
		return
	}
	ps.view.Reset(&ps.req)
	ps.plan.Reset()
	ps.engine.Plan(&ps.view, &ps.plan)
	start := len(st.plan.Buckets)
	for i, bk := range ps.plan.Buckets {
		// The identity is a keyed hash of the key source and its value, so
		// one identity has one name, whichever policy it is in.
		id := maphash.String(ps.seed, bk.Request.ID)
		name, ok := ps.names[id]
		if !ok {
			if len(ps.names) >= maxNames {
				clear(ps.names) // a cache: bounded, so MaxCallers bounds memory
			}
			src, val := ps.engine.Caller(ps.plan.Policies[i], &ps.view)
			name = caller{source: src, value: strings.Clone(val)}
			ps.names[id] = name
		}
		st.plan.Buckets = append(st.plan.Buckets, bk)
		st.plan.Policies = append(st.plan.Policies, ps.plan.Policies[i])
		st.callers = append(st.callers, name)
		st.ids = append(st.ids, id)
	}
	end := len(st.plan.Buckets)
	e.plan = extauthz.Plan{Buckets: st.plan.Buckets[start:end:end], Policies: st.plan.Policies[start:end:end]}
	e.callers, e.ids = st.callers[start:end:end], st.ids[start:end:end]
	if len(e.plan.Buckets) > 0 {
		if ua, ok := ps.view.Header("user-agent"); ok {
			e.ua = maphash.String(ps.seed, ua) | 1
		}
		for _, h := range ps.keyHdrs {
			if k, ok := ps.view.Header(h); ok && strings.TrimSpace(k) != "" {
				e.key = maphash.String(ps.seed, h+"\x00"+strings.TrimSpace(k)) | 1
				break
			}
		}
	}
}

// batchStore holds a batch's plans, callers and ids in four allocations.
type batchStore struct {
	plan    extauthz.Plan
	callers []caller
	ids     []uint64
}

var errNotObject = errors.New("not a JSON object")

// notJSON words a parse error: fastjson's own, without its nesting, or
// the likely cause of a line that ends inside a value.
func notJSON(err error) error {
	msg, _, _ := strings.Cut(err.Error(), "; unparsed tail")
	if strings.Contains(msg, "unexpected end") || strings.Contains(msg, "missing closing") || strings.HasSuffix(msg, "empty string") {
		return errors.New("not JSON: the line ends inside a value (cut short?)")
	}
	for {
		rest, ok := strings.CutPrefix(msg, "cannot parse ")
		if !ok {
			break
		}
		_, after, ok := strings.Cut(rest, ": ")
		if !ok || !strings.HasPrefix(after, "cannot parse ") {
			break
		}
		msg = after
	}
	return errors.New("not JSON: " + msg)
}

// read fills the reusable CheckRequest from one line.
func (ps *parser) read(b []byte, e *entry) error {
	v, err := ps.p.ParseBytes(b)
	if err != nil {
		return notJSON(err)
	}
	o, err := v.Object()
	if err != nil {
		return errNotObject
	}
	if e.at, err = startTime(o); err != nil {
		return err
	}
	if err := ps.readFields(o); err != nil {
		return err
	}
	return ps.readObjects(o)
}

// startTime reads start_time, in microseconds since the Unix epoch.
func startTime(o *fastjson.Object) (int64, error) {
	st := o.Get("start_time")
	if st == nil || st.Type() == fastjson.TypeNull {
		return 0, errors.New(`start_time is missing (Envoy's "%START_TIME%")`)
	}
	if st.Type() != fastjson.TypeString {
		return 0, errors.New(`start_time is not a string: log Envoy's "%START_TIME%", an RFC 3339 time such as 2026-11-30T12:00:01.250Z`)
	}
	t, err := time.Parse(time.RFC3339Nano, str(st))
	if err != nil {
		return 0, fmt.Errorf("start_time %q is not an RFC 3339 time such as 2026-11-30T12:00:01.250Z", st.GetStringBytes())
	}
	return t.UnixMicro(), nil
}

// readFields fills the request's method, path, host, peer address and
// principal, clearing what the previous line left.
func (ps *parser) readFields(o *fastjson.Object) error {
	clear(ps.headers)
	ps.http.Headers = ps.headers
	ps.req.Attributes.ContextExtensions = nil
	ps.req.Attributes.MetadataContext = nil
	ps.req.Attributes.Source.Principal = ""
	ps.sock.Address = ""
	for _, f := range [...]struct {
		name string
		dst  *string
	}{{"method", &ps.http.Method}, {"path", &ps.http.Path}, {"authority", &ps.http.Host}} {
		s, err := optString(o, f.name)
		if err != nil {
			return err
		}
		*f.dst = s
	}
	if ps.http.Method == "" {
		return errors.New(`method is missing (Envoy's "%REQ(:METHOD)%")`)
	}
	ps.headers[":method"], ps.headers[":path"], ps.headers[":authority"] = ps.http.Method, ps.http.Path, ps.http.Host

	addr, err := optString(o, "downstream_remote_address")
	if err != nil {
		return err
	}
	// The CheckRequest carries the address and the port apart; View.Source
	// is the address, as Envoy's %DOWNSTREAM_REMOTE_ADDRESS% writes it
	// before the port ("10.0.0.7:40000", "[2001:db8::1]:40000").
	ps.sock.Address = hostOf(addr)
	ps.req.Attributes.Source.Principal, err = optString(o, "source_principal")
	return err
}

// readObjects fills the request's headers, context extensions and dynamic
// metadata.
func (ps *parser) readObjects(o *fastjson.Object) error {
	err := visitObject(o, "request_headers", "an object of header names and values", func(k []byte, v *fastjson.Value) error {
		if v.Type() != fastjson.TypeString {
			return fmt.Errorf("request_headers.%s is not a string or null", k)
		}
		ps.headers[lowerName(k)] = str(v)
		return nil
	})
	if err != nil {
		return err
	}
	err = visitObject(o, "context_extensions", "an object", func(k []byte, v *fastjson.Value) error {
		if v.Type() != fastjson.TypeString {
			return fmt.Errorf("context_extensions.%s is not a string", k)
		}
		if ps.req.Attributes.ContextExtensions == nil {
			ps.req.Attributes.ContextExtensions = map[string]string{}
		}
		ps.req.Attributes.ContextExtensions[string(k)] = string(v.GetStringBytes())
		return nil
	})
	if err != nil {
		return err
	}
	// %DYNAMIC_METADATA(ns)% writes a namespace the request had not as null.
	return visitObject(o, "metadata", "an object of namespaces", func(k []byte, v *fastjson.Value) error {
		if v.Type() != fastjson.TypeObject {
			return fmt.Errorf("metadata.%s is not an object", k)
		}
		s, err := structpb.NewStruct(toGo(v).(map[string]any))
		if err != nil {
			return fmt.Errorf("metadata.%s: %v", k, err)
		}
		md := ps.req.Attributes.MetadataContext
		if md == nil {
			md = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{}}
			ps.req.Attributes.MetadataContext = md
		}
		md.FilterMetadata[string(k)] = s
		return nil
	})
}

// visitObject calls f with each member of the object o.name, in order,
// until f fails. An absent or null field is an empty object, and a null
// member is skipped: Envoy's json_format writes what a request lacked (a
// header, a value) as null. what says what the field should be.
func visitObject(o *fastjson.Object, name, what string, f func(k []byte, v *fastjson.Value) error) error {
	v := o.Get(name)
	if v == nil || v.Type() == fastjson.TypeNull {
		return nil
	}
	obj, err := v.Object()
	if err != nil {
		return fmt.Errorf("%s is not %s", name, what)
	}
	obj.Visit(func(k []byte, v *fastjson.Value) {
		if err == nil && v.Type() != fastjson.TypeNull {
			err = f(k, v)
		}
	})
	return err
}

// str reads a JSON string without copying it: the string lives in the
// parser's buffer, valid until the next line is parsed. Only the request
// being planned refers to it (View, match and identity keep nothing; the
// caller's value is cloned, identities are fresh hashes), and parsing a line
// without a copy of every header is a good part of replay's speed.
func str(v *fastjson.Value) string {
	b := v.GetStringBytes()
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// optString reads an optional string field: absent and null read as "".
func optString(o *fastjson.Object, name string) (string, error) {
	v := o.Get(name)
	if v == nil {
		return "", nil
	}
	switch v.Type() {
	case fastjson.TypeNull:
		return "", nil
	case fastjson.TypeString:
		return str(v), nil
	}
	return "", fmt.Errorf("%s is not a string", name)
}

// toGo converts a JSON value to what structpb.NewValue takes.
func toGo(v *fastjson.Value) any {
	switch v.Type() {
	case fastjson.TypeObject:
		m := map[string]any{}
		o, _ := v.Object()
		o.Visit(func(k []byte, x *fastjson.Value) { m[string(k)] = toGo(x) })
		return m
	case fastjson.TypeArray:
		a, _ := v.Array()
		out := make([]any, len(a))
		for i, x := range a {
			out[i] = toGo(x)
		}
		return out
	case fastjson.TypeString:
		return string(v.GetStringBytes())
	case fastjson.TypeNumber:
		return v.GetFloat64()
	case fastjson.TypeTrue:
		return true
	case fastjson.TypeFalse:
		return false
	}
	return nil
}

// lowerName returns a header name in lower case, without copying a name
// that already is (the usual case: Envoy's names are lower case).
func lowerName(k []byte) string {
	for _, c := range k {
		if 'A' <= c && c <= 'Z' {
			return strings.ToLower(string(k))
		}
	}
	if len(k) == 0 {
		return ""
	}
	return unsafe.String(&k[0], len(k))
}

// hostOf drops the port (and an IPv6 address's brackets) from an address.
func hostOf(addr string) string {
	if strings.HasPrefix(addr, "[") {
		if i := strings.IndexByte(addr, ']'); i > 0 {
			return addr[1:i]
		}
		return addr
	}
	if i := strings.LastIndexByte(addr, ':'); i >= 0 && strings.IndexByte(addr, ':') == i {
		return addr[:i]
	}
	return addr
}
