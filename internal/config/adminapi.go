package config

import "github.com/floodgate/floodgate/internal/secret"

// AdminAPI is the admin port's /v1/ API: a caller's balance read and
// adjusted, and why a request is limited. It is off (every /v1/ path
// answers 404) unless the section names a token file, whose bearer tokens
// (secret.ReadTokens: NAME:TOKEN lines, or one token alone) it answers;
// the file is read again when it changes, so a token is rotated without a
// restart.
type AdminAPI struct {
	TokenFile string `yaml:"token_file"`
}

// checkAdminAPI checks that the section names its token file, and a port
// to serve on.
func (v *validator) checkAdminAPI(c *Config) {
	a := c.AdminAPI
	if a == nil {
		return
	}
	if a.TokenFile == "" {
		v.at("admin_api.token_file", "is required: the file of bearer tokens the /v1/ API answers (NAME:TOKEN lines, or one token); remove admin_api to turn the API off")
	}
	if c.Listen.Admin == "" {
		v.at("admin_api", "the /v1/ API is served on listen.admin, which is off (\"\")")
	}
}

// resolveAdminAPI reads the token file once, so a server does not start
// with an API nobody can call.
func (c *Config) resolveAdminAPI(v *validator) {
	if a := c.AdminAPI; a != nil && a.TokenFile != "" {
		if _, err := secret.ReadTokens(a.TokenFile); err != nil {
			v.at("admin_api.token_file", "%v", err)
		}
	}
}
