package replay

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/limiter/fielderr"
)

// Set is one what-if: policy settings that override the configuration's
// for a run, written as NAME.FIELD=VALUE (several joined by commas).
type Set struct {
	Text    string // as given, "" for the configuration as it is
	assigns []assign
}

type assign struct {
	policy, field, value string
}

// ParseSet reads "api.capacity=20,api.refill_per_second=5". The fields are
// capacity, refill_per_second and mode (enforce or shadow).
func ParseSet(s string) (Set, error) {
	set := Set{Text: s}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		lhs, val, ok := strings.Cut(part, "=")
		dot := strings.LastIndexByte(lhs, '.')
		if !ok || dot <= 0 || strings.TrimSpace(val) == "" {
			return Set{}, fmt.Errorf("--set %s: want POLICY.FIELD=VALUE, as in api.capacity=20", part)
		}
		a := assign{policy: lhs[:dot], field: lhs[dot+1:], value: strings.TrimSpace(val)}
		switch a.field {
		case "capacity", "refill_per_second", "mode":
		default:
			return Set{}, fmt.Errorf("--set %s: %q cannot be set (capacity, refill_per_second or mode)", part, a.field)
		}
		set.assigns = append(set.assigns, a)
	}
	return set, nil
}

// Merge joins sets into one (later assignments win).
func Merge(sets []Set) Set {
	var m Set
	var texts []string
	for _, s := range sets {
		texts = append(texts, s.Text)
		m.assigns = append(m.assigns, s.assigns...)
	}
	m.Text = strings.Join(texts, ",")
	return m
}

// Apply compiles specs with the set's overrides.
func (s Set) Apply(specs []extauthz.PolicySpec, opts extauthz.Options) (*extauthz.Engine, error) {
	specs = slices.Clone(specs)
	for _, a := range s.assigns {
		i := slices.IndexFunc(specs, func(p extauthz.PolicySpec) bool { return p.Name == a.policy })
		if i < 0 {
			var names []string
			for _, p := range specs {
				names = append(names, p.Name)
			}
			return nil, fmt.Errorf("--set %s.%s: no policy named %q (the configuration has %s)", a.policy, a.field, a.policy, strings.Join(names, ", "))
		}
		switch a.field {
		case "capacity":
			n, err := strconv.ParseInt(a.value, 10, 64)
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("--set %s.capacity=%s: want a whole number > 0", a.policy, a.value)
			}
			specs[i].Capacity = n
		case "refill_per_second":
			specs[i].RefillPerSecond = a.value
		case "mode":
			specs[i].Mode = a.value
		}
	}
	e, err := extauthz.Compile(specs, opts)
	if err != nil {
		var es fielderr.List
		if !errors.As(err, &es) || s.Text == "" {
			return nil, err
		}
		// Name the policy as --set did: policies[2].capacity → api.capacity.
		var msgs []string
		for _, fe := range es {
			path := fe.Path
			var i int
			if _, err := fmt.Sscanf(path, "policies[%d]", &i); err == nil && i >= 0 && i < len(specs) {
				path = specs[i].Name + path[strings.IndexByte(path, ']')+1:]
			}
			msgs = append(msgs, path+": "+fe.Msg)
		}
		return nil, fmt.Errorf("--set %s: %s", s.Text, strings.Join(msgs, "; "))
	}
	return e, nil
}
