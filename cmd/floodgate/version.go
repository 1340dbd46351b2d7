package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// revision is the git commit the binary was built from, stamped with
// -ldflags "-X main.revision=..." by `make build` and `make image` (with a
// "-dirty" suffix when the work tree had changes). Empty otherwise: then
// buildVersion falls back to what the Go toolchain recorded.
var revision string

// buildVersion returns the version and revision to report. The -ldflags
// values win; without them (go build, go install) it uses what the Go
// toolchain recorded in the binary: the module version (`go install
// github.com/floodgate/floodgate/cmd/floodgate@v1.2.3` records v1.2.3) and the
// vcs.revision / vcs.modified settings of a build inside a git checkout.
func buildVersion(stampedVersion, stampedRevision string, bi *debug.BuildInfo) (ver, rev string) {
	ver, rev = stampedVersion, stampedRevision
	if bi == nil {
		return ver, rev
	}
	if (ver == "" || ver == "dev") && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		ver = bi.Main.Version
	}
	if rev == "" {
		modified := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if rev != "" && modified {
			rev += "-dirty"
		}
	}
	return ver, rev
}

// printVersion writes what `floodgate version` prints: the version, the git
// revision ("unknown" when the build recorded none) and the Go toolchain.
func printVersion(w io.Writer) {
	bi, _ := debug.ReadBuildInfo()
	ver, rev := buildVersion(version, revision, bi)
	if ver == "" {
		ver = "dev"
	}
	if rev == "" {
		rev = "unknown"
	}
	fmt.Fprintf(w, "floodgate %s\nrevision  %s\ngo        %s %s/%s\n", ver, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
