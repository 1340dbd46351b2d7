// Package doors is the list of Floodgate's doors and what is done with
// all of them at once: build them on one store (Build), say what they
// serve (Describe), and load a configuration with every door's part
// compiled once (Load and the other loaders). A new door is a folder of
// its own under internal/door and one line in specs.
package doors

import (
	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/door/check"
	"github.com/floodgate/floodgate/internal/door/httpauthz"
	"github.com/floodgate/floodgate/internal/door/ratelimit"
	"github.com/floodgate/floodgate/internal/door/rlqs"
	"github.com/floodgate/floodgate/internal/grpccodec"
)

// specs are every door, in the order they are built and described.
var specs = []door.Spec{check.Spec, ratelimit.Spec, httpauthz.Spec, rlqs.Spec}

// Build returns every door, each on c's part of the configuration and env,
// in the order they are listed and logged.
func Build(c *door.Config, env door.Env) []door.Door {
	env = env.ForBuild()
	ds := make([]door.Door, len(specs))
	for i, k := range specs {
		ds[i] = k.Build(c, env)
	}
	return ds
}

// Codecs are the doors' messages as the gRPC codec reads and writes
// them, in the order of the doors.
func Codecs() []grpccodec.Message {
	var ms []grpccodec.Message
	for _, k := range specs {
		if k.Codec != nil {
			ms = append(ms, k.Codec())
		}
	}
	return ms
}

// Describe says which doors c turns on by what each serves, for the logs
// and floodgate validate: "3 policies", "rate limit domain edge".
func Describe(c *door.Config) []string {
	var out []string
	for _, k := range specs {
		if k.On(c) {
			out = append(out, k.Summary(c))
		}
	}
	return out
}

// noFrontEnd is the problem of a configuration that turns no front end on.
const noFrontEnd = "no front end is configured: list at least one policy (Envoy's ext_authz Check) or set rls.config or rls.xds (Envoy's rate limit service)"
