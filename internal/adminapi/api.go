// Package adminapi is the admin port's /v1/ API, for an operator answering
// one caller: read a caller's bucket without spending and adjust it
// (/v1/buckets/{policy}), and say why a request is limited (/v1/explain),
// behind the bearer tokens of admin_api.token_file. It also holds the
// client `floodgate bucket` and `floodgate explain` play it with.
//
// The API is off (every /v1/ path answers 404) while the configuration in
// use has no admin_api; a request without a token the file holds is
// answered 401 before it reads or spends anything. Every change is logged
// with the name of the token that asked and counted
// (floodgate_admin_adjustments_total); explains are counted too.
package adminapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/secret"
	"github.com/floodgate/floodgate/limiter"
)

// Prefix is the path every route of the API starts with.
const Prefix = "/v1/"

// Options are what the API reads and adjusts with.
type Options struct {
	// Config is the configuration in use (a reload swaps it): its
	// admin_api turns the API on, its policies and limits are what it
	// names.
	Config func() *door.Config
	// Balances reads and adjusts buckets (the process's store); nil
	// answers 501.
	// A Balance marked Local (the memory store's) is answered as this
	// replica's alone.
	Balances limiter.Adjuster
	// Doors are the running doors (nil: none), whose limits in use an
	// explained rate limit request is planned against (a feed's pushes).
	Doors []door.Door
	Log   *zap.Logger
	// Registerer receives the API's metrics (nil: none).
	Registerer prometheus.Registerer
}

// API serves Prefix. Safe for concurrent use.
type API struct {
	o      Options
	tokens tokenCache

	adjustments *prometheus.CounterVec
	reads       prometheus.Counter
	explains    *prometheus.CounterVec
	refused     *prometheus.CounterVec
}

// New builds the API on o.
func New(o Options) *API {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	a := &API{o: o}
	a.adjustments = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "floodgate_admin_adjustments_total",
		Help: "Buckets an operator changed through the admin API (POST /v1/buckets/...), by policy and operation (add, set, reset).",
	}, []string{"policy", "op"})
	a.reads = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "floodgate_admin_reads_total", Help: "Buckets read through the admin API (GET /v1/buckets/...), spending nothing.",
	})
	a.explains = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "floodgate_admin_explains_total", Help: "Requests explained through the admin API (POST /v1/explain), by door (check, ratelimit).",
	}, []string{"door"})
	a.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "floodgate_admin_unauthorized_total", Help: "Admin API requests answered 401, by reason (missing_token, wrong_token).",
	}, []string{"reason"})
	for _, op := range []string{"missing_token", "wrong_token"} {
		a.refused.WithLabelValues(op)
	}
	if o.Registerer != nil {
		o.Registerer.MustRegister(a.adjustments, a.reads, a.explains, a.refused)
	}
	return a
}

// ServeHTTP implements http.Handler for the paths under Prefix.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cfg := a.o.Config()
	if cfg.AdminAPI == nil {
		fail(w, http.StatusNotFound, "the admin API is off: set admin_api.token_file to turn it on")
		return
	}
	who, ok := a.authorize(w, r, cfg.AdminAPI.TokenFile)
	if !ok {
		return
	}
	path := strings.TrimPrefix(r.URL.Path, Prefix)
	switch {
	case strings.HasPrefix(path, "buckets/") && !strings.Contains(path[len("buckets/"):], "/"):
		a.bucket(w, r, cfg, who, path[len("buckets/"):])
	case path == "explain":
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			fail(w, http.StatusMethodNotAllowed, "POST a request to explain")
			return
		}
		a.explain(w, r, cfg, who)
	default:
		fail(w, http.StatusNotFound, "no such path: the admin API serves /v1/buckets/{policy}?key=VALUE and /v1/explain")
	}
}

// authorize finds the name of the bearer token r carries among the token
// file's, or answers 401 (or 503 when the file cannot be read). Every
// token is compared, each in constant time over digests of equal length,
// so the answer's timing says nothing of how much of a token was right.
func (a *API) authorize(w http.ResponseWriter, r *http.Request, file string) (string, bool) {
	toks, err := a.tokens.get(file)
	if err != nil {
		a.o.Log.Error("admin API: admin_api.token_file cannot be read; every request is refused until it can", zap.Error(err))
		fail(w, http.StatusServiceUnavailable, "admin_api.token_file cannot be read: the server's log says why")
		return "", false
	}
	given, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || given == "" {
		a.refused.WithLabelValues("missing_token").Inc()
		w.Header().Set("WWW-Authenticate", `Bearer realm="floodgate admin"`)
		fail(w, http.StatusUnauthorized, "give a token of admin_api.token_file: Authorization: Bearer TOKEN")
		return "", false
	}
	g := sha256.Sum256([]byte(strings.TrimSpace(given)))
	who := ""
	for _, t := range toks {
		if subtle.ConstantTimeCompare(g[:], t.digest[:]) == 1 {
			who = t.name
		}
	}
	if who == "" {
		a.refused.WithLabelValues("wrong_token").Inc()
		w.Header().Set("WWW-Authenticate", `Bearer realm="floodgate admin", error="invalid_token"`)
		fail(w, http.StatusUnauthorized, "the token is not one of admin_api.token_file's")
		return "", false
	}
	return who, true
}

// tokenCache holds the token file's tokens as last read, read again when
// the file's size or modification time changes: a token is rotated by
// rewriting the file, without a restart or a reload.
type tokenCache struct {
	mu   sync.Mutex
	file string
	mod  time.Time
	size int64
	toks []token
}

type token struct {
	name   string
	digest [sha256.Size]byte
}

func (c *tokenCache) get(file string) ([]token, error) {
	fi, err := os.Stat(file)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.toks != nil && c.file == file && c.mod.Equal(fi.ModTime()) && c.size == fi.Size() {
		return c.toks, nil
	}
	read, err := secret.ReadTokens(file)
	if err != nil {
		return nil, err
	}
	toks := make([]token, len(read))
	for i, t := range read {
		toks[i] = token{name: t.Name, digest: sha256.Sum256([]byte(t.Value))}
	}
	c.file, c.mod, c.size, c.toks = file, fi.ModTime(), fi.Size(), toks
	return toks, nil
}

// Error is the body of every answer that is not a 200.
type Error struct {
	Error string `json:"error"`
}

func fail(w http.ResponseWriter, code int, msg string) {
	reply(w, code, Error{Error: msg})
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// storeFailed answers an error of the store's: 503 when it is unreachable,
// 400 for an adjustment the bucket cannot take, 500 otherwise.
func storeFailed(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, limiter.ErrUnavailable):
		fail(w, http.StatusServiceUnavailable, "the store is unavailable, nothing was read or changed: "+err.Error())
	case errors.Is(err, limiter.ErrAdjustment):
		fail(w, http.StatusBadRequest, err.Error())
	default:
		fail(w, http.StatusInternalServerError, err.Error())
	}
}

// decodeBody reads r's JSON body into v: at most maxBody bytes, no field v
// lacks.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		fail(w, http.StatusBadRequest, "the body is not the JSON expected: "+err.Error())
		return false
	}
	return true
}

// maxBody bounds a request's body: an explained request's headers fit.
const maxBody = 1 << 20

// seconds is d in whole seconds, rounded up, as RateLimit-Reset counts.
func seconds(d time.Duration) int64 {
	n := int64(d / time.Second)
	if d%time.Second > 0 {
		n++
	}
	return n
}
