package bench

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
	secs := int((d + time.Second - 1) / time.Second)
	cpu := startFetch(ctx, p, fmt.Sprintf("profile?seconds=%d", secs), filepath.Join(dir, name+".cpu.pprof"), d)
	allocs := startFetch(ctx, p, fmt.Sprintf("allocs?seconds=%d", secs), filepath.Join(dir, name+".allocs.pprof"), d)
	return func() error {
		err := cpu()
		if aerr := allocs(); err == nil {
			err = aerr
		}
		return err
	}
}

// startFetch fetches /debug/pprof/PATH from a floodgate started with
// --pprof into file, in the background, for a window of d. The returned
// func waits for it.
func startFetch(ctx context.Context, p *proc, path, file string, d time.Duration) func() error {
	p.mu.Lock()
	addr := p.pprof
	p.mu.Unlock()
	if addr == "" {
		return func() error { return fmt.Errorf("%s has no pprof address (started without --pprof?)", p.name) }
	}
	errc := make(chan error, 1)
	go func() { errc <- fetch(ctx, "http://"+addr+"/debug/pprof/"+path, file, d+30*time.Second) }()
	return func() error { return <-errc }
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
