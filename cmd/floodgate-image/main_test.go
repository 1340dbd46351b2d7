package main

import (
	"archive/tar"
	"debug/buildinfo"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/floodgate/floodgate/internal/floodgatetest"
)

// staticBinary builds cmd/floodgate as make image does (CGO_ENABLED=0, GOOS=linux, -trimpath),
// once for the package's tests.
func staticBinary(t *testing.T) string {
	return floodgatetest.Floodgate(t, floodgatetest.Build{
		Args: []string{"-trimpath", "-ldflags", "-s -w -X main.version=9.9.9-test -X main.revision=abc123"},
		Env:  []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + runtime.GOARCH},
	})
}

func TestMain(m *testing.M) { os.Exit(floodgatetest.Main(m)) }

// TestTheLicenseLabelIsTheRepositorysLicense: the image says Apache-2.0, LICENSE is that text,
// and the README names it.
func TestTheLicenseLabelIsTheRepositorysLicense(t *testing.T) {
	license, err := os.ReadFile("../../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(license), "Apache License\n                           Version 2.0, January 2004") ||
		!strings.Contains(string(license), "END OF TERMS AND CONDITIONS") {
		t.Error("LICENSE is not the full Apache License 2.0 text")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "Apache License 2.0") || !strings.Contains(string(readme), "(LICENSE)") {
		t.Error("the README does not name the license and link LICENSE")
	}
	img, err := Build(Options{Binary: staticBinary(t), Arch: runtime.GOARCH})
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := cf.Config.Labels["org.opencontainers.image.licenses"]; got != "Apache-2.0" {
		t.Errorf("licenses label %q", got)
	}
}

// shippedConfig writes the floodgate.yaml of manifests/configmap.yaml to a file, its
// identity.hash_secret_file pointed at a secret written beside it (the Deployment mounts the
// Secret there).
func shippedConfig(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../manifests/configmap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(data, &cm); err != nil {
		t.Fatal(err)
	}
	cfg, ok := cm.Data["floodgate.yaml"]
	if !ok {
		t.Fatal("manifests/configmap.yaml has no floodgate.yaml")
	}
	dir := t.TempDir()
	secret := filepath.Join(dir, "hash-secret")
	if err := os.WriteFile(secret, []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg = strings.ReplaceAll(cfg, "/etc/floodgate-secret/hash-secret", secret)
	// The rate limit ConfigMap's mount (optional: an empty directory until
	// manifests/istio/ratelimit is applied, as the kubelet mounts it).
	limits := filepath.Join(dir, "ratelimit")
	if err := os.Mkdir(limits, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg = strings.ReplaceAll(cfg, "/etc/floodgate-ratelimit", limits)
	path := filepath.Join(dir, "floodgate.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestTheImage builds the image twice from one binary: the same digest and the same bytes
// (no timestamps), a config that runs the binary as 65532:65532 with `serve --config` on the
// path the manifests mount, the OCI labels, one layer holding only /floodgate and /bin/ratelimit
// linking to it (no shell), and a binary that runs: `validate` accepts the shipped
// configuration, and started through the link (as Envoy Gateway's rate limit Deployment runs
// /bin/ratelimit) it reads envoyproxy/ratelimit's variables.
func TestTheImage(t *testing.T) {
	bin := staticBinary(t)
	dir := t.TempDir()
	o := Options{Binary: bin, Arch: runtime.GOARCH, Version: "9.9.9-test", Revision: "abc123", Tag: "ghcr.io/floodgate/floodgate:0.1.0"}
	d1, err := Write(filepath.Join(dir, "1.tar"), o)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := Write(filepath.Join(dir, "2.tar"), o)
	if err != nil {
		t.Fatal(err)
	}
	if d1 != d2 {
		t.Fatalf("two builds, two digests: %s, %s", d1, d2)
	}
	b1, _ := os.ReadFile(filepath.Join(dir, "1.tar"))
	b2, _ := os.ReadFile(filepath.Join(dir, "2.tar"))
	if string(b1) != string(b2) {
		t.Fatal("two builds wrote different tarballs")
	}

	tag, err := name.NewTag(o.Tag)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(filepath.Join(dir, "1.tar"), &tag)
	if err != nil {
		t.Fatalf("the tarball does not load: %v", err)
	}
	if d, _ := img.Digest(); d != d1 {
		t.Errorf("loaded digest %s, built %s", d, d1)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{"/floodgate"}) || !slices.Equal(c.Cmd, []string{"serve", "--config", "/etc/floodgate/floodgate.yaml"}) {
		t.Errorf("entrypoint %v cmd %v", c.Entrypoint, c.Cmd)
	}
	if len(c.Shell) > 0 || len(c.Env) > 0 {
		t.Errorf("shell %v env %v: want none", c.Shell, c.Env)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH || cf.Created.Unix() != 0 {
		t.Errorf("os %s arch %s created %v", cf.OS, cf.Architecture, cf.Created)
	}
	for k, v := range map[string]string{
		"org.opencontainers.image.source":   "https://github.com/floodgate/floodgate",
		"org.opencontainers.image.version":  "9.9.9-test",
		"org.opencontainers.image.revision": "abc123",
		"org.opencontainers.image.licenses": "Apache-2.0",
	} {
		if c.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, c.Labels[k], v)
		}
	}

	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers (%v), want 1", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var files []string
	extracted := filepath.Join(dir, "extracted-floodgate")
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, h.Name)
		if h.ModTime.Unix() != 0 || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: mtime %v uid %d gid %d, want the epoch and root", h.Name, h.ModTime, h.Uid, h.Gid)
		}
		if h.Name == "bin/ratelimit" && (h.Typeflag != tar.TypeSymlink || h.Linkname != "/floodgate") {
			t.Errorf("/bin/ratelimit: type %c, linking to %q; want a symlink to /floodgate", h.Typeflag, h.Linkname)
		}
		if h.Name == "bin/" && (h.Typeflag != tar.TypeDir || h.Mode&0o755 != 0o755) {
			t.Errorf("/bin: type %c mode %o; want a directory all may enter", h.Typeflag, h.Mode)
		}
		if h.Name == "floodgate" {
			if h.Mode&0o111 != 0o111 {
				t.Errorf("/floodgate mode %o: not executable by all", h.Mode)
			}
			f, err := os.OpenFile(extracted, os.O_CREATE|os.O_WRONLY, 0o755)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	}
	if !slices.Equal(files, []string{"floodgate", "bin/", "bin/ratelimit"}) {
		t.Fatalf("layer holds %v, want only floodgate and bin/ratelimit (no shell, no other files)", files)
	}

	// The root CAs for Redis TLS travel in the binary, since the image has no CA bundle.
	bi, err := buildinfo.ReadFile(extracted)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(bi.Deps, func(m *debug.Module) bool { return m.Path == "golang.org/x/crypto/x509roots/fallback" }) {
		t.Error("the binary does not embed golang.org/x/crypto/x509roots/fallback: no root CAs in an empty image")
	}
	if !slices.Contains(bi.Settings, debug.BuildSetting{Key: "CGO_ENABLED", Value: "0"}) {
		t.Error("the binary was not built with CGO_ENABLED=0")
	}

	out, err := exec.Command(extracted, "validate", "--config", shippedConfig(t)).CombinedOutput()
	if err != nil {
		t.Fatalf("the image's binary: validate on the shipped config: %v\n%s", err, out)
	}
	out, err = exec.Command(extracted, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "floodgate 9.9.9-test\nrevision  abc123\n") {
		t.Fatalf("the image's binary: version: %v\n%s", err, out)
	}
	link := filepath.Join(dir, "bin", "ratelimit")
	os.MkdirAll(filepath.Dir(link), 0o755)
	if err := os.Symlink(extracted, link); err != nil {
		t.Fatal(err)
	}
	peer := exec.Command(link, "config")
	peer.Env = []string{"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL=envoy-gateway:18001", "CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=redis:6379", "USE_STATSD=false"}
	out, err = peer.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "server: envoy-gateway:18001 # CONFIG_GRPC_XDS_SERVER_URL") {
		t.Fatalf("the image's binary as /bin/ratelimit: config: %v\n%s", err, out)
	}
}

// TestTheBuilderRefusesABinaryTheImageCannotRun: another architecture, or not an ELF file.
func TestTheBuilderRefusesABinaryTheImageCannotRun(t *testing.T) {
	bin := staticBinary(t)
	other := map[string]string{"amd64": "arm64", "arm64": "amd64"}[runtime.GOARCH]
	if other == "" {
		t.Skipf("GOARCH %s: the image is built for amd64 and arm64", runtime.GOARCH)
	}
	if _, err := Build(Options{Binary: bin, Arch: other}); err == nil || !strings.Contains(err.Error(), "GOARCH="+other) {
		t.Errorf("an %s binary as %s: %v", runtime.GOARCH, other, err)
	}
	script := filepath.Join(t.TempDir(), "floodgate")
	os.WriteFile(script, []byte("#!/bin/sh\necho hi\n"), 0o755)
	if _, err := Build(Options{Binary: script, Arch: runtime.GOARCH}); err == nil || !strings.Contains(err.Error(), "not a Linux (ELF) binary") {
		t.Errorf("a shell script: %v", err)
	}
}

// TestMakeImageBuildsForGOARCH: `GOARCH=arm64 make image` cross-compiles the binary for arm64 and
// labels the image arm64, while the builder itself runs on this machine (make -n: the commands).
func TestMakeImageBuildsForGOARCH(t *testing.T) {
	cmd := exec.Command("make", "-n", "-C", "../..", "image")
	cmd.Env = append(os.Environ(), "GOARCH=arm64")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n image: %v\n%s", err, out)
	}
	for _, want := range []string{"CGO_ENABLED=0 GOOS=linux GOARCH=arm64", "-trimpath", "GOOS= GOARCH= go run ./cmd/floodgate-image", "--arch arm64", "--out bin/floodgate-image.tar", "-X main.revision="} {
		if !strings.Contains(string(out), want) {
			t.Errorf("make image does not run %q:\n%s", want, out)
		}
	}
}
