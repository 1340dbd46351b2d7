package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/floodgate/floodgate/cmd/floodgate/config"
	"github.com/floodgate/floodgate/extauthz"
)

// reloader swaps in the policies of a changed configuration file, on SIGHUP
// and, when watching, as soon as polling sees new content. Polling the
// file's content (through any symlinks) catches every way a file can change,
// including Kubernetes' ConfigMap update, which swaps a `..data` symlink and
// leaves the file's own path untouched. An invalid file changes nothing:
// its problems are logged with file:line and the running policies stay.
// Listen addresses and the store are read at start only.
type reloader struct {
	path   string
	server *extauthz.Server
	log    *zap.Logger

	mu       sync.Mutex
	hash     string
	info     *prometheus.GaugeVec
	failures prometheus.Counter
	reloads  prometheus.Counter
}

// newReloader starts from the configuration in use, cfg: a file changed
// since it was read is reloaded at the first poll, however early.
func newReloader(cfg *config.Config, path string, s *extauthz.Server, log *zap.Logger, reg prometheus.Registerer) *reloader {
	r := &reloader{path: path, server: s, log: log,
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "floodgate_config_info", Help: "The configuration in use: 1, labelled with the SHA-256 of its file (empty for the embedded default).",
		}, []string{"sha256"}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_config_reload_failures_total", Help: "Configuration reloads rejected (the previous configuration kept serving).",
		}),
		reloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_config_reloads_total", Help: "Configuration reloads applied.",
		}),
	}
	reg.MustRegister(r.info, r.failures, r.reloads)
	if path != "" {
		r.hash = cfg.Digest
	}
	r.info.WithLabelValues(r.hash).Set(1)
	return r
}

func digest(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func (r *reloader) read() ([]byte, error) {
	if r.path == "" {
		return nil, os.ErrNotExist
	}
	return os.ReadFile(r.path)
}

// reload re-reads the file; force reloads even when the content is the
// same (SIGHUP: the operator asked).
func (r *reloader) reload(force bool) {
	if r.path == "" {
		r.log.Info("reload ignored: running the embedded default")
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	data, err := r.read()
	if err != nil {
		r.failures.Inc()
		r.log.Error("reload rejected; the previous configuration keeps serving", zap.Error(err))
		return
	}
	h := digest(data)
	if h == r.hash && !force {
		return
	}
	cfg, err := config.Parse(r.path, data)
	if err != nil {
		r.failures.Inc()
		r.hash = h // report a broken file once, not at every poll
		r.log.Error("reload rejected; the previous configuration keeps serving", zap.Error(err))
		return
	}
	r.server.SetEngine(cfg.Engine)
	r.info.Reset()
	r.info.WithLabelValues(h).Set(1)
	r.hash = h
	r.reloads.Inc()
	r.log.Info("reloaded", zap.String("config", r.path), zap.Int("policies", len(cfg.Policies)), zap.String("sha256", h))
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
