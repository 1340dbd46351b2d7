package main

// The root certificates Floodgate trusts for Redis TLS when the system has
// none, as in its container image (an empty base, no CA bundle): Mozilla's
// set, compiled into the binary. A system bundle, where there is one, wins.
import _ "golang.org/x/crypto/x509roots/fallback"
