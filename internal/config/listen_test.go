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

func TestMaxRequestBytesInFlight(t *testing.T) {
	if c := mustParse(t, goodPolicy); c.Listen.MaxRequestBytesInFlight != 0 {
		t.Errorf("default %d, want 0 (sized from the memory limit)", c.Listen.MaxRequestBytesInFlight)
	}
	if c := mustParse(t, "listen: {max_request_bytes_in_flight: 67108864}\n"+goodPolicy); c.Listen.MaxRequestBytesInFlight != 64<<20 {
		t.Errorf("read %d, want 64 MiB", c.Listen.MaxRequestBytesInFlight)
	}
	wantProblem(t, "listen:\n  max_request_bytes_in_flight: 1000\n"+goodPolicy,
		`bad.yaml:2: listen.max_request_bytes_in_flight: must be between 1048576 (1 MiB) and 68719476736 (64 GiB), or 0 to size it from the memory limit (got 1000)`)
}

// TestAdminDebug: listen.admin_debug is loopback unless it says all;
// another value is refused with the choices.
func TestAdminDebug(t *testing.T) {
	if c := mustParse(t, goodPolicy); c.Listen.AdminDebug != AdminDebugLoopback {
		t.Errorf("default %q, want loopback", c.Listen.AdminDebug)
	}
	if c := mustParse(t, "listen: {admin: \"0.0.0.0:9192\", admin_debug: all}\n"+goodPolicy); c.Listen.AdminDebug != AdminDebugAll {
		t.Errorf("read %q, want all", c.Listen.AdminDebug)
	}
	wantProblem(t, "listen:\n  admin_debug: everyone\n"+goodPolicy,
		`bad.yaml:2: listen.admin_debug: must be loopback or all (got "everyone")`)
}
