package rlqs

import (
	"encoding/json"
	"net/http"
	"sort"
	"time"
)

// Page is /debug/rlqs as JSON: every bucket the replica follows.
type Page struct {
	IntervalSeconds float64      `json:"interval_seconds"`
	Buckets         []BucketPage `json:"buckets"`
}

// BucketPage is one bucket: its limit, the fleet as last read, and this
// replica's Envoys of it.
type BucketPage struct {
	Domain string `json:"domain"`
	Limit  string `json:"limit"`
	// Key and Caller label the bucket as /debug/limited does (never a
	// value a client brings but an address: the hashed identity).
	Key    string `json:"key"`
	Caller string `json:"caller"`
	// RequestsPerSecond is the limit; FleetDemand and FleetAdmitted the
	// fleet's requests a second as of each Envoy's latest report (the
	// shared store's current epoch, last read), and FleetEnvoys how many
	// report it.
	RequestsPerSecond float64 `json:"requests_per_second"`
	FleetDemand       float64 `json:"fleet_demand"`
	FleetAdmitted     float64 `json:"fleet_admitted"`
	FleetEnvoys       float64 `json:"fleet_envoys"`
	// Contested: the fleet asked for more than the limit; Known: the
	// store has been read; StoreFailedAt: the last report the store
	// could not count (zero: none).
	Contested     bool        `json:"contested"`
	Known         bool        `json:"known"`
	StoreFailedAt time.Time   `json:"store_failed_at,omitzero"`
	Envoys        []EnvoyPage `json:"envoys"`
}

// EnvoyPage is one Envoy's demand and share of a bucket, requests a
// second, and the token bucket that gives its share.
type EnvoyPage struct {
	Envoy  string  `json:"envoy"`
	Demand float64 `json:"demand"`
	// Rose: its last report showed its demand rising through its share,
	// and Demand is what the rest of the fleet leaves until its next.
	Rose          bool    `json:"rose,omitempty"`
	Share         float64 `json:"share"`
	MaxTokens     uint32  `json:"max_tokens"`
	TokensPerFill uint32  `json:"tokens_per_fill"`
	FillSeconds   int64   `json:"fill_interval_seconds"`
}

// Snapshot is the page's content now.
func (d *quotaDoor) Snapshot() Page {
	p := Page{IntervalSeconds: d.o.Interval.Seconds(), Buckets: []BucketPage{}}
	for _, l := range d.fleet.all() {
		l.mu.Lock()
		b := BucketPage{Domain: l.domain, Limit: l.q.Name, Key: l.q.Key, Caller: l.q.Caller, RequestsPerSecond: l.limit,
			FleetDemand: l.fleet, FleetAdmitted: l.admitted, FleetEnvoys: l.fleetEnvoys, Contested: l.contested, Known: l.known, StoreFailedAt: l.storeFailedAt, Envoys: []EnvoyPage{}}
		for _, e := range l.envoys {
			b.Envoys = append(b.Envoys, EnvoyPage{Envoy: e.peer, Demand: e.assumed, Rose: e.rose, Share: e.share,
				MaxTokens: e.tb.MaxTokens, TokensPerFill: e.tb.TokensPerFill, FillSeconds: e.tb.FillSeconds})
		}
		l.mu.Unlock()
		sort.Slice(b.Envoys, func(i, j int) bool { return b.Envoys[i].Envoy < b.Envoys[j].Envoy })
		p.Buckets = append(p.Buckets, b)
	}
	sort.Slice(p.Buckets, func(i, j int) bool {
		a, b := p.Buckets[i], p.Buckets[j]
		if a.Domain != b.Domain {
			return a.Domain < b.Domain
		}
		if a.Limit != b.Limit {
			return a.Limit < b.Limit
		}
		return a.Caller < b.Caller
	})
	return p
}

func (d *quotaDoor) debugPage(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(d.Snapshot())
}
