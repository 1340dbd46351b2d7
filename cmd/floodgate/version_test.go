package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/floodgatetest"
)

// TestVersionPrintsTheStampedBuild: what -ldflags stamps (as make build and
// make image do) is what `floodgate version` prints, with the Go toolchain.
func TestVersionPrintsTheStampedBuild(t *testing.T) {
	bin := floodgatetest.Floodgate(t, floodgatetest.Build{Args: []string{"-ldflags", "-X main.version=1.2.3-test -X main.revision=0123abcd-dirty"}})
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("floodgate version: %v\n%s", err, out)
	}
	want := "floodgate 1.2.3-test\nrevision  0123abcd-dirty\ngo        " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	if string(out) != want {
		t.Fatalf("floodgate version printed\n%s\nwant\n%s", out, want)
	}
}

// TestMakeBuildStampsTheCheckedOutRevision: `make build` stamps the commit
// the work tree is at (git rev-parse HEAD), "-dirty" when it has changes.
func TestMakeBuildStampsTheCheckedOutRevision(t *testing.T) {
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout (%v): make build stamps no revision here", err)
	}
	dirty := exec.Command("git", "diff", "--quiet", "HEAD").Run() != nil
	bin := filepath.Join(t.TempDir(), "floodgate")
	mk := exec.Command("make", "-s", "-C", "../..", "build", "BIN="+bin)
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "revision  " + strings.TrimSpace(string(head))
	if dirty {
		want += "-dirty"
	}
	if !strings.Contains(string(out), want+"\n") {
		t.Fatalf("make build's binary says\n%s\nwant a line %q", out, want)
	}
}

// TestVersionFallsBackToWhatTheToolchainRecorded: without -ldflags (go
// install, go build), the module version and the vcs settings Go records.
func TestVersionFallsBackToWhatTheToolchainRecorded(t *testing.T) {
	installed := &debug.BuildInfo{Main: debug.Module{Path: "github.com/floodgate/floodgate", Version: "v1.4.0"}}
	if v, r := buildVersion("dev", "", installed); v != "v1.4.0" || r != "" {
		t.Errorf("go install @v1.4.0: got %q %q", v, r)
	}
	checkout := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "feedface"}, {Key: "vcs.modified", Value: "true"}}}
	if v, r := buildVersion("dev", "", checkout); v != "dev" || r != "feedface-dirty" {
		t.Errorf("go build in a modified checkout: got %q %q", v, r)
	}
	if v, r := buildVersion("2.0.0", "cafe", checkout); v != "2.0.0" || r != "cafe" {
		t.Errorf("-ldflags must win over the recorded values: got %q %q", v, r)
	}
}
