package check

import (
	"context"
	"fmt"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/limiter/fielderr"
)

// Name names Envoy's ext_authz door.
const Name = "ext_authz"

// Spec is the Check door as the list of doors registers it.
var Spec = door.Spec{
	Name: Name,
	On:   func(c *door.Config) bool { return len(c.Policies) > 0 },
	Summary: func(c *door.Config) string {
		n := len(c.Policies)
		return fmt.Sprintf("%d %s", n, fielderr.Plural(n, "policy", "policies"))
	},
	Codec: Codec,
	Build: newDoor,
}

// checkDoor is Envoy's ext_authz Check (envoy.service.auth.v3), deciding
// the policies.
type checkDoor struct{ s *extauthz.Server }

func newDoor(c *door.Config, env door.Env) door.Door { return &checkDoor{s: env.PolicyServer(c)} }

func (d *checkDoor) Name() string                     { return Name }
func (d *checkDoor) Register(r grpc.ServiceRegistrar) { authv3.RegisterAuthorizationServer(r, d.s) }
func (d *checkDoor) Services() []string {
	return []string{authv3.Authorization_ServiceDesc.ServiceName}
}
func (d *checkDoor) On(c *door.Config) bool { return Spec.On(c) }
func (d *checkDoor) Reload(c *door.Config)  { d.s.SetEngine(c.Engine) }

func (d *checkDoor) AnswerUnread() map[string]func(context.Context) (any, error) {
	return map[string]func(context.Context) (any, error){
		"/" + authv3.Authorization_ServiceDesc.ServiceName + "/Check": func(context.Context) (any, error) { return d.s.Unread(), nil },
	}
}
