package config

import "testing"

// TestListenDefaultsAreTheEmbeddedDefaults: a file that leaves listen (or
// listen.admin) out serves where the embedded default and the README say,
// admin port included; only an explicit admin: "" turns the admin port off.
func TestListenDefaultsAreTheEmbeddedDefaults(t *testing.T) {
	def := Default().Listen
	if def.GRPC != DefaultGRPC || def.Admin != DefaultAdmin {
		t.Fatalf("the embedded default listens on %q and %q, want %q and %q", def.GRPC, def.Admin, DefaultGRPC, DefaultAdmin)
	}
	for _, tc := range []struct{ name, yaml, grpc, admin string }{
		{"no listen section", "", DefaultGRPC, DefaultAdmin},
		{"an empty listen section", "listen: {}\n", DefaultGRPC, DefaultAdmin},
		{"only grpc", "listen: {grpc: \"127.0.0.1:7000\"}\n", "127.0.0.1:7000", DefaultAdmin},
		{"admin set", "listen: {admin: \"127.0.0.1:7001\"}\n", DefaultGRPC, "127.0.0.1:7001"},
		{"admin turned off", "listen:\n  admin: \"\"\n", DefaultGRPC, ""},
	} {
		c := mustParse(t, tc.yaml+goodPolicy)
		if c.Listen.GRPC != tc.grpc || c.Listen.Admin != tc.admin {
			t.Errorf("%s: grpc %q admin %q, want %q and %q", tc.name, c.Listen.GRPC, c.Listen.Admin, tc.grpc, tc.admin)
		}
	}
}
