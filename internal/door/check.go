package door

import (
	"context"
	"fmt"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"

	"github.com/floodgate/floodgate/extauthz"
)

// CheckName names Envoy's ext_authz door.
const CheckName = "ext_authz"

var checkKind = kind{
	name: CheckName,
	on:   func(c *Config) bool { return len(c.Policies) > 0 },
	summary: func(c *Config) string {
		n := len(c.Policies)
		return fmt.Sprintf("%d %s", n, plural(n, "policy", "policies"))
	},
	build: newCheckDoor,
}

// checkDoor is Envoy's ext_authz Check (envoy.service.auth.v3), deciding
// the policies.
type checkDoor struct{ s *extauthz.Server }

func newCheckDoor(c *Config, env Env) Door { return &checkDoor{s: env.policyServer(c)} }

func (d *checkDoor) Name() string                     { return CheckName }
func (d *checkDoor) Register(r grpc.ServiceRegistrar) { authv3.RegisterAuthorizationServer(r, d.s) }
func (d *checkDoor) Services() []string {
	return []string{authv3.Authorization_ServiceDesc.ServiceName}
}
func (d *checkDoor) On(c *Config) bool { return checkKind.on(c) }
func (d *checkDoor) Reload(c *Config)  { d.s.SetEngine(c.Engine) }

func (d *checkDoor) Unread() map[string]func(context.Context) (any, error) {
	return map[string]func(context.Context) (any, error){
		"/" + authv3.Authorization_ServiceDesc.ServiceName + "/Check": func(context.Context) (any, error) { return d.s.Unread(), nil },
	}
}
