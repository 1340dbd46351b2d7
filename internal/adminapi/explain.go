package adminapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"go.uber.org/zap"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/door/check"
	"github.com/floodgate/floodgate/internal/door/httpauthz"
	"github.com/floodgate/floodgate/internal/door/ratelimit"
	"github.com/floodgate/floodgate/internal/door/ratelimit/rls"
	"github.com/floodgate/floodgate/limiter"
)

// ExplainRequest is the body of POST /v1/explain: a request as a door sees
// it, with `floodgate check`'s defaults. An HTTP request (Check's, and the
// HTTP door's): Method, Path, Host, Source (the connection's address),
// Headers ("name: value", repeated names joined as Envoy joins them) and
// Context (the route's context_extensions, "key=value"). Or, with Domain,
// a rate limit service request: Descriptors ("key=value[,key=value...]",
// one descriptor each) and the request's Hits (hits_addend; 0 means 1).
type ExplainRequest struct {
	// Door is "check" (the default: Envoy's Check) or "http" (the HTTP
	// authorization door, asked as `floodgate check --http` asks it from
	// this host: Source appended to X-Forwarded-For, PathPrefix before
	// Path, or with URIHeader and MethodHeader the original request in
	// those headers).
	Door    string   `json:"door,omitempty"`
	Method  string   `json:"method,omitempty"`
	Path    string   `json:"path,omitempty"`
	Host    string   `json:"host,omitempty"`
	Source  string   `json:"source,omitempty"`
	Headers []string `json:"headers,omitempty"`
	Context []string `json:"context,omitempty"`

	PathPrefix   string `json:"path_prefix,omitempty"`
	URIHeader    string `json:"uri_header,omitempty"`
	MethodHeader string `json:"method_header,omitempty"`

	Domain      string   `json:"domain,omitempty"`
	Descriptors []string `json:"descriptors,omitempty"`
	Hits        uint64   `json:"hits,omitempty"`
}

// Explanation is the answer of /v1/explain: what the door would decide,
// which buckets would deny, and every policy (or descriptor) on the way.
type Explanation struct {
	Door string `json:"door"` // check, http or ratelimit
	// Decision is "allow" or "deny", as the store holds the buckets now
	// (no over-limit cache, no lease, no failure mode: see docs/support.md).
	Decision    string                `json:"decision"`
	DeniedBy    []string              `json:"denied_by,omitempty"`
	Policies    []PolicyExplained     `json:"policies,omitempty"`
	Descriptors []DescriptorExplained `json:"descriptors,omitempty"`
	Note        string                `json:"note,omitempty"`
}

// PolicyExplained is one policy's part in an explained request.
type PolicyExplained struct {
	Policy  string `json:"policy"`
	Mode    string `json:"mode"` // enforce or shadow
	Matched bool   `json:"matched"`
	// Reason says why the policy does not apply: the condition of its
	// match that failed, or no key under on_missing_key: skip.
	Reason string `json:"reason,omitempty"`
	// KeySource is the key source that named the bucket ("shared" for the
	// bucket of requests without a key), Identity the bucket's identity.
	KeySource string `json:"key_source,omitempty"`
	Identity  string `json:"identity,omitempty"`
	Cost      int64  `json:"cost,omitempty"`
	Bucket    *State `json:"bucket,omitempty"`
	// Verdict is what the bucket would do with the cost: "pays",
	// "denies", or for a shadow policy "would pay" / "would deny".
	Verdict    string `json:"verdict,omitempty"`
	RetryAfter int64  `json:"retry_after,omitempty"`
}

// DescriptorExplained is one descriptor's part in an explained rate limit
// request.
type DescriptorExplained struct {
	Descriptor string `json:"descriptor"`
	// Meets: no_limit, unlimited, limit, or never (a limit of 0 per unit).
	Meets           string `json:"meets"`
	Limit           string `json:"limit,omitempty"` // the limit's key in the tree
	Name            string `json:"name,omitempty"`
	RequestsPerUnit uint32 `json:"requests_per_unit,omitempty"`
	Unit            string `json:"unit,omitempty"`
	Shadow          bool   `json:"shadow,omitempty"`
	// Asks is take, look (a take of 0), charge or refund; Cost its tokens
	// (those of every descriptor naming the same bucket, added).
	Asks     string `json:"asks,omitempty"`
	Cost     int64  `json:"cost,omitempty"`
	Identity string `json:"identity,omitempty"`
	Bucket   *State `json:"bucket,omitempty"`
	// Verdict: pays, denies, over the limit (a charge that overdraws: it
	// is taken, and answered OVER_LIMIT), or for shadow limits would ...
	Verdict    string `json:"verdict,omitempty"`
	RetryAfter int64  `json:"retry_after,omitempty"`
}

// State is a bucket's balance, read without spending.
type State struct {
	// Limit is the capacity, Remaining the whole tokens left, Reset the
	// seconds until full (rounded up, as RateLimit-Reset), Debt the whole
	// tokens owed.
	Limit     int64 `json:"limit"`
	Remaining int64 `json:"remaining"`
	Reset     int64 `json:"reset"`
	Debt      int64 `json:"debt"`
	// Scope is "shared" (the bucket every replica decides with: Redis) or
	// "replica" (the memory store: this replica's bucket alone).
	Scope string `json:"scope"`
	// Quota is set for a calendar quota's policy: the bucket is then the
	// caller's count in the current window, Limit the quota's limit,
	// Remaining what is left to take in the window (above Limit when an
	// add gave more), Reset the seconds to the window's end, Debt the
	// count above the limit.
	Quota *QuotaWindow `json:"quota,omitempty"`
}

func (a *API) explain(w http.ResponseWriter, r *http.Request, cfg *door.Config, who string) {
	var req ExplainRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if a.o.Balances == nil {
		fail(w, http.StatusNotImplemented, "the store cannot read buckets")
		return
	}
	var out Explanation
	var err error
	if req.Domain != "" || len(req.Descriptors) > 0 {
		out, err = a.explainRLS(r.Context(), cfg, req)
	} else {
		out, err = a.explainCheck(r.Context(), cfg, req)
	}
	if err != nil {
		if _, bad := err.(badRequest); bad {
			fail(w, http.StatusBadRequest, err.Error())
		} else {
			storeFailed(w, err)
		}
		return
	}
	a.explains.WithLabelValues(out.Door).Inc()
	a.o.Log.Info("admin API: request explained", zap.String("by", who), zap.String("door", out.Door),
		zap.String("decision", out.Decision), zap.Strings("denied_by", out.DeniedBy))
	reply(w, http.StatusOK, out)
}

// badRequest is a request the API cannot explain, as the caller wrote it.
type badRequest struct{ error }

func (a *API) explainCheck(ctx context.Context, cfg *door.Config, req ExplainRequest) (Explanation, error) {
	def := func(s, d string) string {
		if s == "" {
			return d
		}
		return s
	}
	out := Explanation{Door: "check", Decision: "allow"}
	var explained []extauthz.Explained
	switch req.Door {
	case "", "check":
		creq, err := check.Request(def(req.Method, "GET"), def(req.Host, "localhost"), def(req.Path, "/"), def(req.Source, "127.0.0.1"), req.Headers, req.Context, false)
		if err != nil {
			return Explanation{}, badRequest{err}
		}
		explained = cfg.Engine.Explain(extauthz.NewView(creq))
	case "http":
		if (req.URIHeader == "") != (req.MethodHeader == "") {
			return Explanation{}, badRequest{errors.New("give uri_header and method_header together (http_authz.original_uri_header and original_method_header)")}
		}
		hreq, err := httpauthz.Request(ctx, httpauthz.ClientArgs{Addr: "127.0.0.1", Method: def(req.Method, "GET"), Host: def(req.Host, "localhost"),
			Path: def(req.Path, "/"), Source: def(req.Source, "127.0.0.1"), Prefix: req.PathPrefix, URIHeader: req.URIHeader,
			MethodHeader: req.MethodHeader, Headers: req.Headers})
		if err != nil {
			return Explanation{}, badRequest{err}
		}
		hreq.RemoteAddr = "127.0.0.1:40000" // the proxy: floodgate check --http on this host
		out.Door = "http"
		explained = httpauthz.Engine(cfg).Explain(extauthz.NewHTTPView(hreq, httpauthz.RequestOptions(cfg)))
	default:
		return Explanation{}, badRequest{fmt.Errorf("door %q: want check or http (or a domain, for the rate limit service)", req.Door)}
	}
	for _, x := range explained {
		pe := PolicyExplained{Policy: x.Policy.Name, Mode: "enforce", Matched: x.Matched, Reason: x.Failed}
		if x.Policy.Shadow {
			pe.Mode = "shadow"
		}
		if x.Planned {
			pe.KeySource, pe.Identity, pe.Cost = x.Source, x.Request.ID, x.Request.Cost
			if pe.KeySource == "" {
				pe.KeySource = "shared"
			}
			b, err := a.o.Balances.Adjust(ctx, x.Request, limiter.Adjustment{Op: limiter.OpRead})
			if err != nil {
				return Explanation{}, err
			}
			st := stateOf(x.Request.Quota, b)
			pe.Bucket = &st
			pays, retry := verdict(x.Request, b)
			pe.Verdict, pe.RetryAfter = say(pays, x.Policy.Shadow), retry
			if !pays && !x.Policy.Shadow {
				out.Decision, out.DeniedBy = "deny", append(out.DeniedBy, x.Policy.Name)
			}
		}
		out.Policies = append(out.Policies, pe)
	}
	return out, nil
}

func (a *API) explainRLS(ctx context.Context, cfg *door.Config, req ExplainRequest) (Explanation, error) {
	rreq, err := ratelimit.Request(req.Domain, req.Descriptors, req.Hits)
	if err != nil {
		return Explanation{}, badRequest{err}
	}
	plan, err := ratelimit.Explain(a.o.Doors, cfg, rreq)
	if err != nil {
		return Explanation{}, badRequest{err}
	}
	out := Explanation{Door: "ratelimit", Decision: "allow"}
	read := map[int]limiter.Balance{} // by bucket: descriptors may share one
	for i, it := range plan.Items {
		de := DescriptorExplained{Descriptor: descriptorText(plan.Entries[i]), Meets: meets[it.Meets], Name: it.Name,
			RequestsPerUnit: it.RequestsPerUnit, Unit: it.Unit.Name, Shadow: it.Shadow}
		if it.Limit != nil {
			de.Limit = it.Limit.Key
		} else if it.Override != nil {
			de.Limit = "the descriptor's own limit"
		}
		label := de.Descriptor
		if de.Limit != "" && it.Limit != nil {
			label = de.Limit
		}
		switch it.Meets {
		case rls.Bucketed:
			b := plan.Buckets[it.Bucket].Request
			de.Asks, de.Cost, de.Identity = asks(b.Kind, b.Cost), b.Cost, b.ID
			bal, ok := read[it.Bucket]
			if !ok {
				if bal, err = a.o.Balances.Adjust(ctx, b, limiter.Adjustment{Op: limiter.OpRead}); err != nil {
					return Explanation{}, err
				}
				read[it.Bucket] = bal
			}
			st := stateOf(b.Quota, bal)
			de.Bucket = &st
			denies := false
			switch b.Kind {
			case limiter.Take:
				pays, retry := verdict(b, bal)
				de.Verdict, de.RetryAfter, denies = say(pays, it.Shadow), retry, !pays
			case limiter.Charge:
				if overdraws(b, bal) {
					de.Verdict, denies = "over the limit (charged all the same)", true
				} else {
					de.Verdict = "pays"
				}
				if it.Shadow {
					de.Verdict = "shadow: " + de.Verdict
				}
			default:
				de.Verdict = "gives back"
			}
			if denies && !it.Shadow {
				out.Decision, out.DeniedBy = "deny", append(out.DeniedBy, label)
			}
		case rls.Never:
			de.Asks, de.Cost, de.Identity = asks(it.Request, it.Cost), it.Cost, it.ID
			if it.Request != limiter.Refund && it.Cost > 0 {
				de.Verdict = say(false, it.Shadow)
				if !it.Shadow {
					out.Decision, out.DeniedBy = "deny", append(out.DeniedBy, label)
				}
			}
		}
		out.Descriptors = append(out.Descriptors, de)
	}
	if cfg.RLS.ShadowMode && out.Decision == "deny" {
		out.Decision, out.Note = "allow", "rls.shadow_mode: the service answers every request OK; denied_by is what would deny"
	}
	return out, nil
}

var meets = map[rls.Meets]string{rls.NoLimit: "no_limit", rls.Unlimited: "unlimited", rls.Bucketed: "limit", rls.Never: "never"}

func asks(k limiter.Kind, cost int64) string {
	switch {
	case k == limiter.Charge:
		return "charge"
	case k == limiter.Refund:
		return "refund"
	case cost == 0:
		return "look"
	}
	return "take"
}

func descriptorText(es []rls.Entry) string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Key + "=" + e.Value
	}
	return strings.Join(parts, ",")
}

// verdict says whether the bucket read as b pays r's take, and when not,
// in how many seconds it could (0 for a cost above the capacity, which
// never passes): for a quota, at its window's end.
func verdict(r limiter.Request, b limiter.Balance) (pays bool, retryAfter int64) {
	l, m, cost := r.Limit, b.Missing, r.Cost
	if q := r.Quota; q != nil {
		switch {
		case q.Fits(m, cost):
			return true, 0
		case cost > q.Limit:
			return false, 0
		}
		return false, max(seconds(b.ResetAfter), 1)
	}
	if l.Fits(m, cost) {
		return true, 0
	}
	res := l.Result(m, limiter.Take, cost, false)
	if res.ExceedsCapacity {
		return false, 0
	}
	return false, max(seconds(res.RetryAfter), 1)
}

// overdraws reports whether r's charge takes the bucket read as b over
// its limit (a quota: its count over the quota's limit).
func overdraws(r limiter.Request, b limiter.Balance) bool {
	if r.Quota != nil {
		return b.Missing+r.Cost > r.Quota.Limit
	}
	k, _ := r.Limit.Units()
	return b.Missing+r.Cost*k > r.Limit.CapacityUnits()
}

func say(pays, shadow bool) string {
	switch {
	case pays && shadow:
		return "would pay"
	case shadow:
		return "would deny"
	case pays:
		return "pays"
	}
	return "denies"
}

// stateOf is balance b as the answers show it (q: its quota, if any).
func stateOf(q *limiter.Quota, b limiter.Balance) State {
	s := State{Limit: b.Limit, Remaining: b.Remaining, Reset: seconds(b.ResetAfter), Debt: b.Debt, Scope: "shared",
		Quota: quotaWindow(q, b)}
	if b.Local {
		s.Scope = "replica"
	}
	return s
}
