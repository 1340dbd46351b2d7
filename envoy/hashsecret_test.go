package envoy

import "os"

// The Floodgate configurations here read the identity hash secret from FLOODGATE_HASH_SECRET
// (identity.hash_secret_env), which a deployment provides; the tests provide a stand-in.
func init() {
	if os.Getenv("FLOODGATE_HASH_SECRET") == "" {
		os.Setenv("FLOODGATE_HASH_SECRET", "test-only-secret-0123456789abcdef")
	}
}
