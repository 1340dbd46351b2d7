package extauthz

// Recording who is limited (decide.Recorder; /debug/limited): the
// pipeline hands each policy's result to the policy's family, whose tally
// asks callerName for the caller's label only when it starts following it.

// callerName labels a caller for the report, only when the recorder starts
// following it (decide.Namer), in a form safe to show an operator.
type callerName struct {
	e  *Engine
	p  *Policy
	v  *View
	id string
}

// Name returns the key source that identified the caller and its label
// as an operator may see it (Engine.caller, not in the clear): never a
// header's value, which may be a secret, but the hashed identity the logs
// show. The shared bucket of requests without a key is "-" with no key.
func (c *callerName) Name() (key, caller string) {
	if c.id == sharedID {
		return "", sharedID
	}
	if key, caller = c.e.caller(c.p, c.v, false); key == "" {
		return "", c.id
	}
	return key, caller
}
