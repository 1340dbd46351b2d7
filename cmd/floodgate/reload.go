package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc/health"

	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/rls"
)

// reloader swaps in the policies of a changed configuration file, on SIGHUP
// and, when watching, as soon as polling sees new content. Polling the
// file's content (through any symlinks) catches every way a file can change,
// including Kubernetes' ConfigMap update, which swaps a `..data` symlink and
// leaves the file's own path untouched. An invalid file changes nothing:
// its problems are logged with file:line and the running policies stay.
// Listen addresses, the store, the identity hash secret, the log, the
// runtime and reload settings are read at start only: a reload that changes
// them says so. A new secret would re-key every caller's bucket, replica by
// replica, so it waits for a restart (docs/configuration.md says how to
// rotate it).
type reloader struct {
	src     source
	doors   []door.Door
	health  *health.Server
	log     *zap.Logger
	started *config.Config // what the restart-only sections run with

	mu       sync.Mutex
	data     []byte   // the file's content when last read
	rlsPath  string   // rls.config as the file last read names it
	rlsData  []byte   // the rate limit configuration's files when last read
	domains  []string // the rate limit domains served
	info     *prometheus.GaugeVec
	failures prometheus.Counter
	reloads  prometheus.Counter
	ignored  *prometheus.CounterVec
	removed  prometheus.Counter
}

// source is where a configuration is read from, and read again by a
// reload: a file, or (ratelimit mode) the configuration built from
// envoyproxy/ratelimit's environment, which does not change while the
// process runs (the rate limit files it names do). name is "" for the
// embedded default, which is never reloaded.
type source struct {
	name string
	read func() ([]byte, error)
	// explain, when set, rewrites a reload's error in the terms the user
	// configured (ratelimit mode: the environment's variables).
	explain func(error) error
}

// fileSource is the configuration file at path ("" for the embedded
// default).
func fileSource(path string) source {
	if path == "" {
		return source{}
	}
	return source{name: path, read: func() ([]byte, error) { return config.ReadFile(path) }}
}

// newReloader starts from the configuration in use, cfg, read from src:
// a file changed since it was read is reloaded at the first poll, however
// early.
func newReloader(cfg *door.Config, src source, doors []door.Door, hs *health.Server, log *zap.Logger, reg prometheus.Registerer) *reloader {
	r := &reloader{src: src, doors: doors, health: hs, log: log, started: cfg.Config, rlsPath: cfg.RLS.Config, rlsData: rls.Snapshot(cfg.RLS.Config),
		domains: domainsOf(cfg),
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "floodgate_config_info",
			Help: "The configuration in use: 1, labelled with the SHA-256 of its file (sha256, empty for the embedded default) and of the rate limit files rls.config names, as read (rls_sha256, empty without them).",
		}, []string{"sha256", "rls_sha256"}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_config_reload_failures_total", Help: "Configuration reloads rejected (the previous configuration kept serving).",
		}),
		reloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_config_reloads_total", Help: "Configuration reloads applied.",
		}),
		ignored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_config_reload_ignored_total",
			Help: "Applied reloads that changed a section read at start only (listen, store, identity, log, runtime, reload), by section: the change waits for a restart.",
		}, []string{"section"}),
		removed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_rls_domains_removed_total",
			Help: "Rate limit domains a reload removed: their descriptors meet no limit from then on.",
		}),
	}
	reg.MustRegister(r.info, r.failures, r.reloads, r.ignored, r.removed)
	hash := ""
	if src.name != "" {
		hash, r.data = cfg.Digest, cfg.Bytes()
	}
	r.info.WithLabelValues(hash, digest(r.rlsData)).Set(1)
	return r
}

// digest is the SHA-256 (hex) of the rate limit files' snapshot, "" for
// none.
func digest(snapshot []byte) string {
	if len(snapshot) == 0 {
		return ""
	}
	sum := sha256.Sum256(snapshot)
	return hex.EncodeToString(sum[:])
}

// domainsOf lists the rate limit domains cfg serves.
func domainsOf(cfg *door.Config) []string {
	if cfg.Limits == nil {
		return nil
	}
	return cfg.Limits.Domains()
}

// reload re-reads the file; force reloads even when the content is the
// same (SIGHUP: the operator asked).
func (r *reloader) reload(force bool) {
	if r.src.name == "" {
		r.log.Info("reload ignored: running the embedded default")
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	data, err := r.src.read()
	if err != nil {
		r.failures.Inc()
		if r.src.explain != nil {
			err = r.src.explain(err)
		}
		r.log.Error("reload rejected; the previous configuration keeps serving", zap.Error(err))
		return
	}
	// The rate limit files the configuration last read names (a
	// ConfigMap's symlink swap shows here); a changed file may name others,
	// which Parse below finds.
	rlsData := rls.Snapshot(r.rlsPath)
	if bytes.Equal(data, r.data) && bytes.Equal(rlsData, r.rlsData) && !force {
		return
	}
	r.data, r.rlsData = data, rlsData // a broken file is reported once, not at every poll
	cfg, changed, secretErr, err := r.compile(data)
	if err != nil {
		r.failures.Inc()
		if r.src.explain != nil {
			err = r.src.explain(err)
		}
		r.log.Error("reload rejected; the previous configuration keeps serving", zap.Error(err))
		return
	}
	for _, d := range r.doors {
		d.Reload(cfg)
	}
	setDoorHealth(r.health, r.doors, cfg)
	r.info.Reset()
	r.info.WithLabelValues(cfg.Digest, digest(r.rlsData)).Set(1)
	r.reloads.Inc()
	domains := domainsOf(cfg)
	if gone := removedFrom(r.domains, domains); len(gone) > 0 {
		r.removed.Add(float64(len(gone)))
		r.log.Warn("rate limit domains removed: their descriptors meet no limit now", zap.Strings("removed", gone), zap.Strings("rls_domains", domains))
	}
	r.domains = domains
	fields := []zap.Field{zap.String("config", r.src.name), zap.Int("policies", len(cfg.Policies)), zap.String("sha256", cfg.Digest),
		zap.Strings("doors", door.Describe(cfg)), zap.Strings("rls_domains", domains), zap.String("rls_sha256", digest(r.rlsData))}
	if secretErr != nil {
		fields = append(fields, zap.NamedError("identity_secret", secretErr))
	}
	if len(changed) > 0 {
		for _, s := range changed {
			r.ignored.WithLabelValues(s).Inc()
		}
		r.log.Warn("reloaded the policies; changes to "+strings.Join(changed, ", ")+" take effect on restart only", append(fields, zap.Strings("ignored_until_restart", changed))...)
		return
	}
	r.log.Info("reloaded", fields...)
}

// removedFrom lists the domains of before (sorted) that after (sorted)
// lacks.
func removedFrom(before, after []string) []string {
	var gone []string
	for _, d := range before {
		if _, found := slices.BinarySearch(after, d); !found {
			gone = append(gone, d)
		}
	}
	return gone
}

// compile loads data for the running server (the identity secret it
// started with), reading the rate limit files it names. changed and
// secretErr are ResolveReload's.
func (r *reloader) compile(data []byte) (cfg *door.Config, changed []string, secretErr error, err error) {
	return door.LoadReload(r.src.name, data, r.started, func(c *config.Config) {
		if c.RLS.Config != r.rlsPath {
			r.rlsPath, r.rlsData = c.RLS.Config, rls.Snapshot(c.RLS.Config)
		}
	})
}

// watch polls the file every interval until ctx ends.
func (r *reloader) watch(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.reload(false)
		}
	}
}
