package extauthz

import "github.com/floodgate/floodgate/limiter/fielderr"

// PolicySpec is one policy as configured (the `policies:` list of the YAML
// configuration). Compile checks it and turns it into a Policy.
type PolicySpec struct {
	Name  string    `yaml:"name"`
	Match MatchSpec `yaml:"match"`
	// Key lists identity sources, tried in order; the first non-empty wins:
	// header:NAME, client_ip, context:NAME, metadata:NAMESPACE:PATH,
	// fingerprint, source_principal.
	Key []string `yaml:"key"`
	// OnMissingKey decides a request for which no source yields a value:
	// "shared" (one bucket for all such requests, the default) or "skip"
	// (the policy does not apply).
	OnMissingKey string `yaml:"on_missing_key"`
	// FingerprintHeaders are hashed together by the fingerprint source.
	FingerprintHeaders []string `yaml:"fingerprint_headers"`

	Capacity        int64  `yaml:"capacity"`
	RefillPerSecond string `yaml:"refill_per_second"` // a decimal or a fraction: 2, 0.5, 1/60
	// Quota, in place of Capacity and RefillPerSecond, makes the policy a
	// calendar quota: Limit tokens in each window of the calendar.
	Quota *QuotaSpec `yaml:"quota"`

	// Cost is what one request takes (default 1). CostHeader, when set and
	// holding a whole number, overrides it, bounded by MaxCost (default the
	// capacity); a missing or unreadable value falls back to Cost.
	Cost       int64  `yaml:"cost"`
	CostHeader string `yaml:"cost_header"`
	MaxCost    int64  `yaml:"max_cost"`

	// Mode "enforce" (default) denies; "shadow" decides and counts, never denies.
	Mode string `yaml:"mode"`
	// Lease "off" (default) decides every request in the store; "auto"
	// lets a replica that sees one of the policy's buckets hot decide it
	// from a lease of its tokens (limiter/lease), never admitting more
	// than the bucket allows.
	Lease string `yaml:"lease"`
}

// QuotaSpec is a calendar quota: at most Limit tokens in each fixed window
// of Period (hour, day, week, month or year) of the wall clock of Timezone
// (an IANA name; UTC when empty). AnchorDay starts a week on a weekday (1 =
// Monday … 7 = Sunday, default 1) and a month on a day of the month (1-31,
// clamped to a short month's last day, default 1); a year starts on that
// day of January. An hour or a day takes none.
type QuotaSpec struct {
	Limit     int64  `yaml:"limit"`
	Period    string `yaml:"period"`
	Timezone  string `yaml:"timezone"`
	AnchorDay int    `yaml:"anchor_day"`
}

// MatchSpec selects the requests a policy applies to. Every field set must
// fit; an empty MatchSpec matches every HTTP request.
type MatchSpec struct {
	PathPrefix string `yaml:"path_prefix"`
	Path       string `yaml:"path"`
	// CaseSensitive false matches Path and PathPrefix ignoring ASCII case,
	// as Envoy's RouteMatch.case_sensitive does; unset or true, case
	// matters, as in Envoy's default.
	CaseSensitive *bool             `yaml:"case_sensitive"`
	Methods       []string          `yaml:"methods"`
	Hosts         []string          `yaml:"hosts"` // exact, or "*.example.com"
	Headers       []HeaderMatchSpec `yaml:"headers"`
	Context       map[string]string `yaml:"context"` // context_extensions that must be equal
	// Protocol is "http" (default) or "tcp": a tcp policy applies to checks
	// from Envoy's network filter, keyed by the connection's address.
	Protocol string `yaml:"protocol"`
	// Principals, when set, require the caller's principal (View.Principal:
	// under Istio mTLS the peer's SPIFFE ID) to be one of these, each exact
	// or a prefix ending in "*"; NotPrincipals excludes those it lists.
	// Behind an Istio ingress gateway every outside request carries the
	// gateway's own principal: these tell it from in-mesh callers.
	Principals    []string `yaml:"principals"`
	NotPrincipals []string `yaml:"not_principals"`
}

// HeaderMatchSpec matches one request header: equal to Value, starting with
// Prefix, or (with neither) present; Present: false requires it absent.
type HeaderMatchSpec struct {
	Name    string `yaml:"name"`
	Value   string `yaml:"value"`
	Prefix  string `yaml:"prefix"`
	Present *bool  `yaml:"present"`
}

// errorList collects Compile's problems, each at a path such as
// "policies[2].capacity"; the config loader puts each at its file and line.
type errorList struct{ errs fielderr.List }

func (l *errorList) add(path, format string, args ...any) { l.errs.Add(path, format, args...) }

func (l *errorList) err() error { return l.errs.Err() }
