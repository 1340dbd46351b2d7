package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// startProfile records a CPU profile and an allocation profile (the
// allocations made during the window only) of a floodgate started with
// --pprof, for d rounded up to whole seconds, into dir/NAME.cpu.pprof and
// dir/NAME.allocs.pprof. The returned func waits for both.
func startProfile(ctx context.Context, p *proc, dir, name string, d time.Duration) func() error {
	p.mu.Lock()
	addr := p.pprof
	p.mu.Unlock()
	if addr == "" {
		return func() error { return fmt.Errorf("%s has no pprof address (started without --pprof?)", p.name) }
	}
	secs := int((d + time.Second - 1) / time.Second)
	errc := make(chan error, 2)
	for _, kind := range []string{"profile", "allocs"} {
		go func(kind string) {
			file := filepath.Join(dir, name+".cpu.pprof")
			if kind == "allocs" {
				file = filepath.Join(dir, name+".allocs.pprof")
			}
			errc <- fetch(ctx, fmt.Sprintf("http://%s/debug/pprof/%s?seconds=%d", addr, kind, secs), file, d+30*time.Second)
		}(kind)
	}
	return func() error {
		var first error
		for i := 0; i < 2; i++ {
			if err := <-errc; err != nil && first == nil {
				first = err
			}
		}
		return first
	}
}

func fetch(ctx context.Context, url, file string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s: %s", url, resp.Status, b)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
