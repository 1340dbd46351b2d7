package adminapi

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/calendar"
)

// Bucket is the answer of /v1/buckets/{policy}: one caller's bucket, after
// the change a POST asked for.
type Bucket struct {
	Policy string `json:"policy"`
	// Source is the key source the caller's value was read as ("" for an
	// identity given as is, or the shared bucket); Identity is the bucket's
	// identity, hashed as decisions hash it.
	Source   string `json:"source,omitempty"`
	Identity string `json:"identity"`
	// State is the bucket's balance after the change (its fields inline
	// in the answer).
	State
	// Op, N and By say what a POST changed, and who asked.
	Op   string `json:"op,omitempty"`
	N    *int64 `json:"n,omitempty"`
	By   string `json:"by,omitempty"`
	Note string `json:"note,omitempty"`
}

// QuotaWindow is a quota's current window, as the store's clock chose it.
type QuotaWindow struct {
	// Period (hour, day, week, month, year, or a fixed window's length in
	// seconds, for rls.windows: fixed) and Timezone are the calendar's.
	Period   string `json:"period"`
	Timezone string `json:"timezone"`
	// Start and End are the window's, RFC 3339 in Timezone.
	Start string `json:"window_start"`
	End   string `json:"window_end"`
}

// calendarOf is the shape limiter/calendar's windows have.
type calendarOf interface {
	Period() calendar.Period
	Location() *time.Location
}

// quotaWindow is q's window as b read it, nil for a token bucket.
func quotaWindow(q *limiter.Quota, b limiter.Balance) *QuotaWindow {
	if q == nil || !b.Quota {
		return nil
	}
	loc, period := time.UTC, ""
	if c, ok := q.Windows.(calendarOf); ok {
		loc, period = c.Location(), c.Period().String()
	} else {
		period = strconv.FormatInt(int64(b.WindowEnd.Sub(b.WindowStart)/time.Second), 10) + "s"
	}
	return &QuotaWindow{Period: period, Timezone: loc.String(),
		Start: b.WindowStart.In(loc).Format(time.RFC3339), End: b.WindowEnd.In(loc).Format(time.RFC3339)}
}

// Change is the body of a POST to /v1/buckets/{policy}: exactly one of
// {"add": N} (N may be negative), {"set": N} or {"reset": true}.
type Change struct {
	Add   *int64 `json:"add,omitempty"`
	Set   *int64 `json:"set,omitempty"`
	Reset bool   `json:"reset,omitempty"`
}

// adjustment is c as the store takes it.
func (c Change) adjustment() (limiter.Adjustment, bool) {
	n := 0
	var a limiter.Adjustment
	if c.Add != nil {
		n, a = n+1, limiter.Adjustment{Op: limiter.OpAdd, N: *c.Add}
	}
	if c.Set != nil {
		n, a = n+1, limiter.Adjustment{Op: limiter.OpSet, N: *c.Set}
	}
	if c.Reset {
		n, a = n+1, limiter.Adjustment{Op: limiter.OpReset}
	}
	return a, n == 1
}

const replicaNote = "the memory store keeps this replica's buckets only: each replica holds its own bucket for this caller"

func (a *API) bucket(w http.ResponseWriter, r *http.Request, cfg *door.Config, who, name string) {
	adj := limiter.Adjustment{Op: limiter.OpRead}
	switch r.Method {
	case http.MethodGet:
	case http.MethodPost:
		var c Change
		if !decodeBody(w, r, &c) {
			return
		}
		var ok bool
		if adj, ok = c.adjustment(); !ok {
			fail(w, http.StatusBadRequest, `give exactly one of {"add": N}, {"set": N} or {"reset": true}`)
			return
		}
	default:
		w.Header().Set("Allow", "GET, POST")
		fail(w, http.StatusMethodNotAllowed, "GET reads a bucket, POST adjusts it")
		return
	}
	p := cfg.Engine.Policy(name)
	if p == nil {
		var names []string
		for _, p := range cfg.Engine.Policies {
			names = append(names, p.Name)
		}
		fail(w, http.StatusNotFound, "no policy named "+name+" (policies: "+strings.Join(names, ", ")+")")
		return
	}
	q := r.URL.Query()
	_, hasKey := q["key"]
	id, source := q.Get("id"), q.Get("source")
	var req limiter.Request
	switch {
	case hasKey == (id != ""):
		fail(w, http.StatusBadRequest, "give ?key=VALUE (what the caller sends for the policy's key source; ?source=SOURCE picks another of its sources) or ?id=IDENTITY (a hashed identity, as floodgate explain shows it)")
		return
	case id != "":
		if !identity(id, p.KeySources()) {
			fail(w, http.StatusBadRequest, "id "+strconv.Quote(id)+" is no identity of policy "+p.Name+": 22 characters of base64url as floodgate explain shows them, - for the shared bucket, or + and a header source for the bucket of repeated headers")
			return
		}
		req = limiter.Request{Name: p.Name, ID: id, Limit: p.Limit, Quota: p.Quota}
	default:
		var err error
		if req, err = cfg.Engine.BucketOf(p, source, q.Get("key")); err != nil {
			fail(w, http.StatusBadRequest, err.Error())
			return
		}
		if source == "" && q.Get("key") != "" {
			source = p.KeySources()[0]
		}
	}
	if a.o.Balances == nil {
		fail(w, http.StatusNotImplemented, "the store cannot read or adjust buckets")
		return
	}
	bal, err := a.o.Balances.Adjust(r.Context(), req, adj)
	if err != nil {
		if adj.Op != limiter.OpRead {
			a.o.Log.Warn("admin API: bucket adjustment failed", zap.String("by", who), zap.String("policy", p.Name),
				zap.String("identity", req.ID), zap.String("op", adj.Op.String()), zap.Int64("n", adj.N), zap.Error(err))
		}
		storeFailed(w, err)
		return
	}
	out := bucketOf(p.Name, source, req.ID, req.Quota, bal)
	if adj.Op == limiter.OpRead {
		a.reads.Inc()
	} else {
		a.adjustments.WithLabelValues(p.Name, adj.Op.String()).Inc()
		out.Op, out.By = adj.Op.String(), who
		if adj.Op != limiter.OpReset {
			n := adj.N
			out.N = &n
		}
		fields := []zap.Field{zap.String("by", who), zap.String("policy", p.Name), zap.String("source", source),
			zap.String("identity", req.ID), zap.String("op", adj.Op.String()), zap.Int64("n", adj.N),
			zap.Int64("remaining", bal.Remaining), zap.Int64("debt", bal.Debt), zap.String("scope", out.Scope)}
		if out.Quota != nil {
			fields = append(fields, zap.String("window_end", out.Quota.End)) // a quota's change lasts until then
		}
		a.o.Log.Info("admin API: bucket adjusted", fields...)
	}
	reply(w, http.StatusOK, out)
}

// identity reports whether id is an identity a decision under a policy
// with key sources sources can draw: a hashed one (22 characters of
// base64url), the shared bucket's "-", or "+" and a header source for
// requests that repeat it. Anything else would name a bucket no request
// draws from.
func identity(id string, sources []string) bool {
	if id == "-" {
		return true
	}
	if tag, ok := strings.CutPrefix(id, "+"); ok {
		return strings.HasPrefix(tag, "header:") && slices.Contains(sources, tag)
	}
	if len(id) != 22 {
		return false
	}
	for _, c := range id {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// bucketOf is the answer for a bucket's balance (q: its quota, if any).
func bucketOf(policy, source, id string, q *limiter.Quota, b limiter.Balance) Bucket {
	out := Bucket{Policy: policy, Source: source, Identity: id, State: stateOf(q, b)}
	if b.Local {
		out.Note = replicaNote
	}
	return out
}
