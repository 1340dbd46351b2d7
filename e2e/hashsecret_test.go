package e2e

import "os"

// envoy/floodgate.yaml and envoy/jwt/floodgate.yaml read the identity hash secret from
// FLOODGATE_HASH_SECRET, which run.sh generates and compose passes on; the tests that load them
// provide a stand-in.
func init() {
	if os.Getenv("FLOODGATE_HASH_SECRET") == "" {
		os.Setenv("FLOODGATE_HASH_SECRET", "test-only-secret-0123456789abcdef")
	}
}
