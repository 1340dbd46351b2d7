package adminapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/floodgate/floodgate/internal/secret"
)

// TokenEnv is the environment variable `floodgate bucket` and `floodgate
// explain` read the token from when no --token-file is given.
const TokenEnv = "FLOODGATE_ADMIN_TOKEN"

// ReadToken is the token a command presents: from file (a token file as
// admin_api.token_file holds it: the token named name, or its only one),
// or else from TokenEnv.
func ReadToken(file, name string) (string, error) {
	if file == "" {
		if t := strings.TrimSpace(os.Getenv(TokenEnv)); t != "" {
			return t, nil
		}
		return "", fmt.Errorf("give --token-file FILE (a token of admin_api.token_file) or set %s", TokenEnv)
	}
	toks, err := secret.ReadTokens(file)
	if err != nil {
		return "", err
	}
	for _, t := range toks {
		if t.Name == name || (name == "" && len(toks) == 1) {
			return t.Value, nil
		}
	}
	if name == "" {
		return "", fmt.Errorf("%s holds %d tokens: say which with --as NAME", file, len(toks))
	}
	return "", fmt.Errorf("%s holds no token named %s", file, name)
}

// Client calls an admin API: at Addr (host:port, or a URL), with Token.
type Client struct {
	Addr, Token string
	HTTP        *http.Client // nil: http.DefaultClient
}

// Bucket reads (change nil) or adjusts policy's bucket of the caller whose
// key source (source; "" for the policy's first) reads key, or of the
// identity id when id is set.
func (c Client) Bucket(ctx context.Context, policy, source, key, id string, change *Change) (Bucket, error) {
	q := url.Values{}
	if id != "" {
		q.Set("id", id)
	} else {
		q.Set("key", key)
		if source != "" {
			q.Set("source", source)
		}
	}
	method, body := http.MethodGet, []byte(nil)
	if change != nil {
		method = http.MethodPost
		body, _ = json.Marshal(change)
	}
	var b Bucket
	err := c.call(ctx, method, "buckets/"+url.PathEscape(policy)+"?"+q.Encode(), body, &b)
	return b, err
}

// Explain asks why req would be limited.
func (c Client) Explain(ctx context.Context, req ExplainRequest) (Explanation, error) {
	body, _ := json.Marshal(req)
	var e Explanation
	err := c.call(ctx, http.MethodPost, "explain", body, &e)
	return e, err
}

func (c Client) call(ctx context.Context, method, path string, body []byte, out any) error {
	base := c.Addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(base, "/")+Prefix+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e Error
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			return fmt.Errorf("%s: %s", resp.Status, e.Error)
		}
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(data)))
	}
	return json.Unmarshal(data, out)
}

// String says what b holds, in a line.
func (b Bucket) String() string {
	var s strings.Builder
	if b.Op != "" {
		fmt.Fprintf(&s, "%s", b.Op)
		if b.N != nil {
			fmt.Fprintf(&s, " %d", *b.N)
		}
		fmt.Fprintf(&s, " by %s: ", b.By)
	}
	fmt.Fprintf(&s, "%s %s", b.Policy, b.Identity)
	if b.Source != "" {
		fmt.Fprintf(&s, " (%s)", b.Source)
	}
	fmt.Fprintf(&s, ": %s", b.State.String())
	if b.Scope == "replica" {
		s.WriteString("; this replica's bucket only (memory store)")
	}
	return s.String()
}

// String is the balance for a terminal: a quota's in its window, a
// bucket's until full.
func (st State) String() string {
	limit, remaining, reset, debt, q := st.Limit, st.Remaining, st.Reset, st.Debt, st.Quota
	if q != nil {
		period := q.Period
		if period != "" && period[0] >= '0' && period[0] <= '9' {
			period += " window" // rls.windows: fixed's length in seconds
		}
		s := fmt.Sprintf("quota: %d of %d left this %s", remaining, limit, period)
		if debt > 0 {
			s += fmt.Sprintf(", %d over", debt)
		}
		return s + fmt.Sprintf(", window %s to %s (%s), ends in %ds", q.Start, q.End, q.Timezone, reset)
	}
	s := fmt.Sprintf("%d of %d left", remaining, limit)
	if debt > 0 {
		s += fmt.Sprintf(", %d owed", debt)
	}
	if reset > 0 {
		s += fmt.Sprintf(", full in %ds", reset)
	} else {
		s += ", full"
	}
	return s
}

// Text is e for a terminal: the decision, then a line a policy (or
// descriptor).
func (e Explanation) Text() string {
	var s strings.Builder
	if e.Decision == "deny" {
		fmt.Fprintf(&s, "deny (%s): denied by %s\n", e.Door, strings.Join(e.DeniedBy, ", "))
	} else {
		fmt.Fprintf(&s, "allow (%s)\n", e.Door)
	}
	if e.Note != "" {
		fmt.Fprintf(&s, "  note: %s", e.Note)
		if e.Decision != "deny" && len(e.DeniedBy) > 0 {
			fmt.Fprintf(&s, " (%s)", strings.Join(e.DeniedBy, ", "))
		}
		s.WriteString("\n")
	}
	for _, p := range e.Policies {
		fmt.Fprintf(&s, "  %s (%s): ", p.Policy, p.Mode)
		switch {
		case !p.Matched:
			fmt.Fprintf(&s, "does not match: %s\n", p.Reason)
			continue
		case p.Bucket == nil:
			fmt.Fprintf(&s, "matches, no bucket: %s\n", p.Reason)
			continue
		}
		fmt.Fprintf(&s, "key %s, identity %s, cost %d: %s: %s", p.KeySource, p.Identity, p.Cost,
			p.Bucket.String(), p.Verdict)
		if p.RetryAfter > 0 {
			fmt.Fprintf(&s, ", retry after %ds", p.RetryAfter)
		}
		s.WriteString("\n")
	}
	for _, d := range e.Descriptors {
		fmt.Fprintf(&s, "  %s: ", d.Descriptor)
		if d.Meets == "no_limit" || d.Meets == "unlimited" {
			fmt.Fprintf(&s, "%s\n", strings.ReplaceAll(d.Meets, "_", " "))
			continue
		}
		fmt.Fprintf(&s, "limit %s (%d per %s", d.Limit, d.RequestsPerUnit, strings.ToLower(d.Unit))
		if d.Shadow {
			s.WriteString(", shadow")
		}
		fmt.Fprintf(&s, "), %s %d", d.Asks, d.Cost)
		if d.Bucket != nil {
			fmt.Fprintf(&s, ", identity %s: %s", d.Identity, d.Bucket.String())
		}
		if d.Verdict != "" {
			fmt.Fprintf(&s, ": %s", d.Verdict)
		}
		if d.RetryAfter > 0 {
			fmt.Fprintf(&s, ", retry after %ds", d.RetryAfter)
		}
		s.WriteString("\n")
	}
	return s.String()
}
