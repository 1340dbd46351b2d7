package ratelimit

import (
	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/door/ratelimit/rls"
)

// quotas are the door's limits as the quota door (RLQS) reads them from
// the board (door.QuotaBoard): published on every reload and push, with
// the identity hash the door keys its buckets with, so that a quota
// charges the bucket this door decides the same descriptor by.
type quotas struct {
	l    *rls.Limits
	hash rls.Hasher
}

func (q quotas) HasDomain(domain string) bool { return q.l.HasDomain(domain) }

func (q quotas) Quota(domain string, chain []door.Entry) door.Quota {
	entries := make([]rls.Entry, len(chain))
	for i, e := range chain {
		entries[i] = rls.Entry{Key: e.Key, Value: e.Value}
	}
	lim, bucket := q.l.Chain(domain, entries, q.hash)
	if lim == nil {
		return door.Quota{}
	}
	name := rls.MetricName(lim)
	out := door.Quota{Name: name, Report: rls.ReportName(lim), Shadow: lim.ShadowMode, RequestsPerUnit: lim.RequestsPerUnit,
		UnitSeconds: lim.Unit.Seconds, Bucket: bucket}
	out.Key, out.Caller = rls.Label(entries, lim, bucket.ID)
	switch {
	case lim.Unlimited:
		out.Meets = door.Unlimited
	case lim.RequestsPerUnit == 0:
		out.Meets = door.Never
	default:
		out.Meets = door.Bucketed
	}
	return out
}
