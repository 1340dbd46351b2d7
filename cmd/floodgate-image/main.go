// Command floodgate-image builds Floodgate's container image as a tarball
// that `docker load` (or podman, crane, skopeo) reads, without a container
// engine or a registry: one layer holding the static binary at /floodgate,
// and /bin/ratelimit linking to it, on an empty base, run as 65532:65532.
// Started as /bin/ratelimit (Envoy Gateway's rate limit Deployment runs
// that command), the binary is a drop-in for envoyproxy/ratelimit,
// configured by that server's environment variables.
//
// The image is reproducible: the layer's files and the image's dates are
// fixed (the Unix epoch), so the same binary and flags give the same digest.
// `make image` builds the binary (CGO_ENABLED=0, -trimpath, version and
// revision stamped) and runs this:
//
//	floodgate-image --binary bin/floodgate-linux-amd64 --arch amd64 \
//	    --version 0.1.0 --revision <commit> --tag ghcr.io/floodgate/floodgate:0.1.0 \
//	    --out bin/floodgate-image.tar
//
// The image holds no CA bundle: the binary carries its own roots
// (golang.org/x/crypto/x509roots/fallback, imported by cmd/floodgate), used
// when the system has none, as in this image.
package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The image's fixed parts. cmd/floodgate/Dockerfile and the manifests use the
// same user, entrypoint and arguments.
const (
	BinaryPath = "/floodgate"
	// RatelimitPath links to BinaryPath under the name envoyproxy/ratelimit's
	// image runs.
	RatelimitPath = "/bin/ratelimit"
	User          = "65532:65532"
	ConfigPath    = "/etc/floodgate/floodgate.yaml"
	Source        = "https://github.com/floodgate/floodgate"
)

// Args are the default arguments of the entrypoint.
var Args = []string{"serve", "--config", ConfigPath}

// epoch is every date in the image: no build time leaks into the digest.
var epoch = time.Unix(0, 0).UTC()

// Options describe one image.
type Options struct {
	Binary   string // the static linux binary to ship
	Arch     string // GOARCH of that binary: amd64, arm64
	Version  string
	Revision string
	Tag      string // the reference `docker load` tags the image with
}

func main() {
	var o Options
	out := flag.String("out", "bin/floodgate-image.tar", "the tarball to write")
	flag.StringVar(&o.Binary, "binary", "", "the static floodgate binary (CGO_ENABLED=0, GOOS=linux)")
	flag.StringVar(&o.Arch, "arch", "amd64", "the binary's GOARCH")
	flag.StringVar(&o.Version, "version", "dev", "org.opencontainers.image.version")
	flag.StringVar(&o.Revision, "revision", "", "org.opencontainers.image.revision (the git commit)")
	flag.StringVar(&o.Tag, "tag", "ghcr.io/floodgate/floodgate:dev", "the image reference in the tarball")
	flag.Parse()
	if o.Binary == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: floodgate-image --binary FILE [--arch amd64|arm64] [--version V] [--revision R] [--tag REF] [--out FILE]")
		os.Exit(2)
	}
	digest, err := Write(*out, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "floodgate-image:", err)
		os.Exit(1)
	}
	fmt.Printf("%s: %s linux/%s %s\n", *out, o.Tag, o.Arch, digest)
}

// Write builds the image and writes it to path as a docker-load tarball; it
// returns the image digest.
func Write(path string, o Options) (v1.Hash, error) {
	ref, err := name.NewTag(o.Tag)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("--tag %q: %w", o.Tag, err)
	}
	img, err := Build(o)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := tarball.WriteToFile(path, ref, img); err != nil {
		return v1.Hash{}, err
	}
	return img.Digest()
}

// goarch maps GOARCH to the ELF machine the binary must be built for.
var goarch = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// Build assembles the image.
func Build(o Options) (v1.Image, error) {
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, err
	}
	if err := checkStatic(bin, o.Arch); err != nil {
		return nil, fmt.Errorf("%s: %w", o.Binary, err)
	}
	layerTar, err := binaryLayer(bin)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return nil, err
	}
	// Docker's media types: what a docker-load tarball holds (its manifest.json has no media
	// types), so the digest here is the one of the image loaded from it.
	img, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "floodgate-image: " + BinaryPath, Comment: "static floodgate binary"},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = o.Arch, "linux"
	cf.Created = v1.Time{Time: epoch}
	cf.Config = v1.Config{
		User:       User,
		Entrypoint: []string{BinaryPath},
		Cmd:        Args,
		WorkingDir: "/",
		// 9191: ext_authz gRPC and grpc.health.v1; 9192: /metrics, /healthz, /readyz.
		ExposedPorts: map[string]struct{}{"9191/tcp": {}, "9192/tcp": {}},
		Labels: map[string]string{
			"org.opencontainers.image.title":    "floodgate",
			"org.opencontainers.image.source":   Source,
			"org.opencontainers.image.version":  o.Version,
			"org.opencontainers.image.revision": o.Revision,
			"org.opencontainers.image.licenses": "Apache-2.0",
		},
	}
	return mutate.ConfigFile(img, cf)
}

// checkStatic refuses a binary the empty base cannot run: not a Linux ELF
// executable for the architecture, or one that needs a dynamic loader.
func checkStatic(bin []byte, arch string) error {
	want, ok := goarch[arch]
	if !ok {
		return fmt.Errorf("--arch %q: want amd64 or arm64", arch)
	}
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return fmt.Errorf("not a Linux (ELF) binary: %w (build it with GOOS=linux)", err)
	}
	defer f.Close()
	if f.Machine != want {
		return fmt.Errorf("built for %v, not %s (GOARCH=%s)", f.Machine, arch, arch)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("dynamically linked: the empty base has no loader or libc (build with CGO_ENABLED=0)")
		}
	}
	return nil
}

// binaryLayer is the layer's tar: the binary, owned by root and executable
// by all, and the link to it, dated at the epoch.
func binaryLayer(bin []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{
		Typeflag: tar.TypeReg, Name: BinaryPath[1:], Mode: 0o755, Size: int64(len(bin)),
		ModTime: epoch, Format: tar.FormatPAX,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	dir, _ := path.Split(RatelimitPath)
	for _, h := range []*tar.Header{
		{Typeflag: tar.TypeDir, Name: dir[1:], Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX},
		{Typeflag: tar.TypeSymlink, Name: RatelimitPath[1:], Linkname: BinaryPath, Mode: 0o777, ModTime: epoch, Format: tar.FormatPAX},
	} {
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
