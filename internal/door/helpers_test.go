package door

import "github.com/floodgate/floodgate/extauthz"

// checkServer is the ext_authz server behind the Check door of doors.
func checkServer(doors []Door) *extauthz.Server { return Find(doors, CheckName).(*checkDoor).s }

// httpServer is the HTTP door's server among doors (nil when it is off).
func httpServer(doors []Door) *extauthz.HTTPServer { return Find(doors, HTTPName).(*httpDoor).h }

// servedDomains are the domains the rate limit door of doors serves now
// (none before a feed's first push).
func servedDomains(doors []Door) []string {
	if d := Find(doors, RateLimitName).(*rateLimitDoor); d.ready.Load() {
		return d.s.Config().Domains()
	}
	return nil
}
