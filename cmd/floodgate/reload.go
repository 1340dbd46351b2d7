package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc/health"

	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/doors"
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
	// applied, when set, hears of every configuration a reload applies.
	applied func(*door.Config)

	mu       sync.Mutex
	data     []byte    // the file's content when last read
	files    []watched // the files the doors read beside it
	info     *prometheus.GaugeVec
	failures prometheus.Counter
	reloads  prometheus.Counter
	ignored  *prometheus.CounterVec
}

// watched is a door's files as the file last read names them, and their
// content when last read.
type watched struct {
	door  door.Files
	names string
	data  []byte
}

// newReloader starts from the configuration in use, cfg, read from src:
// a file changed since it was read is reloaded at the first poll, however
// early.
func newReloader(cfg *door.Config, src source, doors []door.Door, hs *health.Server, log *zap.Logger, reg prometheus.Registerer) *reloader {
	r := &reloader{src: src, doors: doors, health: hs, log: log, started: cfg.Config}
	labels, help := []string{"sha256"}, "The configuration in use: 1, labelled with the SHA-256 of its file (sha256, empty for the embedded default)"
	for _, d := range door.Watched(doors) {
		names := d.Files(cfg.Config)
		r.files = append(r.files, watched{door: d, names: names, data: d.Snapshot(names)})
		label, what := d.DigestLabel()
		labels, help = append(labels, label), help+" and of "+what
	}
	r.info = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "floodgate_config_info", Help: help + "."}, labels)
	r.failures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "floodgate_config_reload_failures_total", Help: "Configuration reloads rejected (the previous configuration kept serving).",
	})
	r.reloads = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "floodgate_config_reloads_total", Help: "Configuration reloads applied.",
	})
	r.ignored = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "floodgate_config_reload_ignored_total",
		Help: "Applied reloads that changed a section read at start only (listen, store, identity, log, runtime, reload), by section: the change waits for a restart.",
	}, []string{"section"})
	reg.MustRegister(r.info, r.failures, r.reloads, r.ignored)
	hash := ""
	if src.name != "" {
		hash, r.data = cfg.Digest, cfg.Bytes()
	}
	r.info.WithLabelValues(r.labels(hash)...).Set(1)
	return r
}

// labels are floodgate_config_info's label values: the file's digest,
// then each door's files'.
func (r *reloader) labels(hash string) []string {
	values := []string{hash}
	for _, w := range r.files {
		values = append(values, digest(w.data))
	}
	return values
}

// digest is the SHA-256 (hex) of a snapshot of files, "" for none.
func digest(snapshot []byte) string {
	if len(snapshot) == 0 {
		return ""
	}
	sum := sha256.Sum256(snapshot)
	return hex.EncodeToString(sum[:])
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
	// The doors' files the configuration last read names (a ConfigMap's
	// symlink swap shows here); a changed file may name others, which
	// compile below finds.
	same := bytes.Equal(data, r.data)
	for i, w := range r.files {
		now := w.door.Snapshot(w.names)
		same = same && bytes.Equal(now, w.data)
		r.files[i].data = now
	}
	if same && !force {
		return
	}
	r.data = data // a broken file is reported once, not at every poll
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
	if r.applied != nil {
		r.applied(cfg)
	}
	setDoorHealth(r.health, r.doors, cfg)
	r.info.Reset()
	r.info.WithLabelValues(r.labels(cfg.Digest)...).Set(1)
	r.reloads.Inc()
	door.Reported(r.doors, cfg)
	fields := []zap.Field{zap.String("config", r.src.name), zap.Int("policies", len(cfg.Policies)), zap.String("sha256", cfg.Digest),
		zap.Strings("doors", doors.Describe(cfg))}
	fields = append(fields, door.Fields(r.doors, cfg)...)
	for _, w := range r.files {
		label, _ := w.door.DigestLabel()
		fields = append(fields, zap.String(label, digest(w.data)))
	}
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

// compile loads data for the running server (the identity secret it
// started with), reading the doors' files it names. changed and
// secretErr are ResolveReload's.
func (r *reloader) compile(data []byte) (cfg *door.Config, changed []string, secretErr error, err error) {
	return doors.LoadReload(r.src.name, data, r.started, func(c *config.Config) {
		for i, w := range r.files {
			if names := w.door.Files(c); names != w.names {
				r.files[i] = watched{door: w.door, names: names, data: w.door.Snapshot(names)}
			}
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
