package extauthz

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/floodgate/floodgate/limiter"
)

// MissingLogInterval is how often, at most, the log says that a policy's
// key sources came up empty: often enough that an operator sees a
// misconfigured key (a header Envoy does not send, metadata Istio never
// fills) before users do, rarely enough that it cannot flood the log.
const MissingLogInterval = time.Minute

// missingReporter counts and logs requests that fell into a policy's
// shared bucket because every key source was empty. Its zero value works:
// the clock defaults to the system's.
type missingReporter struct {
	clock limiter.Clock
	last  sync.Map // policy name -> *atomic.Int64, unix nanoseconds of the last log line
}

// noteMissing records every policy of plan whose identity is the shared
// bucket, and counts those whose identity is the bucket of repeated key
// headers (a client's doing, not a misconfiguration: counted, not logged).
func (s *Server) noteMissing(st *serverState, plan *Plan, v *View) {
	for i, p := range plan.Policies {
		if id := plan.Buckets[i].Request.ID; strings.HasPrefix(id, repeatedPrefix) {
			st.counters[p].identityRepeated.Inc()
		} else if id == sharedID {
			st.counters[p].identityMissing.Inc()
			if s.missing.due(p.Name) {
				s.log.Warn("a policy's key sources were all empty: the request used the policy's shared bucket (logged at most once a minute per policy; floodgate_identity_missing_total counts every one)",
					zap.String("policy", p.Name), zap.Strings("key", p.keyTags()), zap.String("path", truncate(v.Path, 256)))
			}
		}
	}
}

// due reports whether policy's log line is due, and if so takes the turn.
func (m *missingReporter) due(policy string) bool {
	var now int64
	if m.clock != nil {
		now = m.clock.Now().UnixNano()
	} else {
		now = time.Now().UnixNano()
	}
	v, ok := m.last.Load(policy)
	if !ok {
		v, _ = m.last.LoadOrStore(policy, new(atomic.Int64))
	}
	last := v.(*atomic.Int64)
	prev := last.Load()
	if prev != 0 && now-prev < int64(MissingLogInterval) {
		return false
	}
	return last.CompareAndSwap(prev, now)
}

// keyTags lists the policy's key sources as written.
func (p *Policy) keyTags() []string {
	tags := make([]string, len(p.keys))
	for i, k := range p.keys {
		tags[i] = k.tag
	}
	return tags
}

// truncate cuts s to at most n bytes, for a log line.
func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
