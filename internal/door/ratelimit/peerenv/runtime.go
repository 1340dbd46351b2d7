package peerenv

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

type runtimeNote struct {
	refuse bool
	msg    string
}

// checkRuntime walks the files envoyproxy/ratelimit's file provider would
// load as rate limit configuration (src/provider/file_provider.go, through
// lyft/goruntime's loader: every file below its directory, recursively,
// whatever its name; dot files and directories skipped only with
// RUNTIME_IGNOREDOTFILES; with RUNTIME_WATCH_ROOT, those below
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY whose path there starts with
// RUNTIME_APPDIRECTORY and a dot) and names each one internal/door/ratelimit/rls would not
// read from RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY (which
// reads the *.yaml and *.yml files directly in it, dot names passed over):
// refused, since a limit would be left out, unless it sits in a dot
// directory (a Kubernetes ConfigMap's own, whose files Floodgate reads
// through the links beside it; envoyproxy/ratelimit would load them twice
// and refuse its duplicate domains). A missing directory is left to the
// loading, which refuses it as envoyproxy/ratelimit's loader does.
func checkRuntime(root, sub, app string, ignoreDot, watchRoot bool) []runtimeNote {
	walked := filepath.Join(root, sub, app)
	if watchRoot {
		walked = filepath.Join(root, sub)
	}
	dir := filepath.Join(root, sub, app)
	// Both read through symlinks (a RUNTIME_ROOT that is one, swapped on
	// every release): compare the files they lead to.
	if r, err := filepath.EvalSymlinks(walked); err == nil {
		walked = r
	}
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		dir = r
	}
	var out []runtimeNote
	filepath.Walk(walked, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return nil // goruntime logs and goes on
		}
		dot := strings.HasPrefix(info.Name(), ".")
		if info.IsDir() {
			if ignoreDot && dot && path != walked {
				return filepath.SkipDir
			}
			return nil
		}
		if ignoreDot && dot {
			return nil
		}
		rel, _ := filepath.Rel(walked, path)
		key := strings.ReplaceAll(rel, string(filepath.Separator), ".")
		if watchRoot && !strings.HasPrefix(key, app+".") {
			return nil
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			if target, err := os.Stat(path); err != nil || target.IsDir() {
				return nil // goruntime cannot read it: skipped there too
			}
		}
		name := filepath.Base(path)
		if filepath.Dir(path) == dir && !dot && (strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
			return nil // rls reads it
		}
		inDotDir := false
		for _, part := range strings.Split(filepath.Dir(rel), string(filepath.Separator)) {
			inDotDir = inDotDir || (part != "." && strings.HasPrefix(part, "."))
		}
		if inDotDir {
			out = append(out, runtimeNote{msg: fmt.Sprintf("%s is passed over (a dot directory's, as a Kubernetes ConfigMap mount has: its files are read through the links beside it; envoyproxy/ratelimit without RUNTIME_IGNOREDOTFILES=true would load them twice)", path)})
			return nil
		}
		out = append(out, runtimeNote{refuse: true, msg: fmt.Sprintf("envoyproxy/ratelimit loads %s as rate limit configuration, and Floodgate reads only the *.yaml and *.yml files directly in %s: rename or move it there", path, dir)})
		return nil
	})
	return out
}
