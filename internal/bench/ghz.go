package bench

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// ghzVersion is the ghz release make bench-ghz installs. ghz is the load
// generator of the reference figures in docs/performance.md (the no-op
// ceiling and envoyproxy/ratelimit under ghz at concurrency 50); driving the
// same servers with it puts Floodgate's rows next to those figures.
const ghzVersion = "v0.120.0"

// ghzDriver drives cells with a ghz process instead of the in-process
// client: the same pre-encoded requests, handed to ghz as count-delimited
// binary messages, which it sends in turn over one connection.
type ghzDriver struct {
	bin      string
	dir      string // where the protoset and the request files are written
	protoset string
	files    map[string]requestFile // by workload cache key
	version  string                 // "ghz v0.120.0", from the binary's build information
}

// requestFile is one workload's requests as ghz reads them, and the CPU
// seconds ghz spends loading them (measured with one call).
type requestFile struct {
	path    string
	startup float64
}

func newGhzDriver(bin, dir string) (*ghzDriver, error) {
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("ghz: %w (make bench-tools installs ghz %s into bin/)", err, ghzVersion)
	}
	// go install leaves ghz's own --version at "dev": its module version
	// is in the binary's build information.
	version := "ghz (version unknown)"
	if bi, err := buildinfo.ReadFile(path); err == nil {
		version = "ghz " + bi.Main.Version
	}
	g := &ghzDriver{version: version, bin: bin, dir: dir, protoset: filepath.Join(dir, "ext_authz.protoset"), files: map[string]requestFile{}}
	b, err := proto.Marshal(benchProtoset())
	if err != nil {
		return nil, err
	}
	return g, os.WriteFile(g.protoset, b, 0o600)
}

// benchProtoset describes every method floodbench calls: ext_authz Check
// and, for (r), the rate-limit service's ShouldRateLimit.
func benchProtoset() *descriptorpb.FileDescriptorSet {
	return protoset(authv3.File_envoy_service_auth_v3_external_auth_proto, rlsv3.File_envoy_service_ratelimit_v3_rls_proto)
}

// protoset is fds and every file they import, dependencies first: what ghz
// needs to know the methods' types without server reflection.
func protoset(fds ...protoreflect.FileDescriptor) *descriptorpb.FileDescriptorSet {
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var add func(protoreflect.FileDescriptor)
	add = func(f protoreflect.FileDescriptor) {
		if seen[f.Path()] {
			return
		}
		seen[f.Path()] = true
		imps := f.Imports()
		for i := 0; i < imps.Len(); i++ {
			add(imps.Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(f))
	}
	for _, fd := range fds {
		add(fd)
	}
	return set
}

// delimited is reqs as ghz reads several binary messages: each preceded by
// its length as a varint.
func delimited(reqs [][]byte) []byte {
	var b []byte
	for _, r := range reqs {
		b = protowire.AppendVarint(b, uint64(len(r)))
		b = append(b, r...)
	}
	return b
}

// prepare writes w's requests once per workload, and measures the CPU ghz
// spends loading them by letting it make one call to target: drive subtracts
// that start-up from ghz's CPU, so the client column is the cost of sending.
func (g *ghzDriver) prepare(ctx context.Context, target, key string, w workload, timeout time.Duration) (requestFile, error) {
	if f, ok := g.files[key]; ok {
		return f, nil
	}
	p := filepath.Join(g.dir, "requests-"+strconv.Itoa(len(g.files))+".bin")
	if err := os.WriteFile(p, delimited(w.reqs), 0o600); err != nil {
		return requestFile{}, err
	}
	r, cpu, err := g.run(ctx, target, p, time.Minute, "--call", ghzCall(w), "-n", "1", "-c", "1", "-t", timeout.String())
	if err != nil {
		return requestFile{}, err
	}
	if r.decisions != 1 {
		return requestFile{}, fmt.Errorf("ghz: a single call to %s did not succeed: %v", target, r.firstErr)
	}
	f := requestFile{path: p, startup: cpu}
	g.files[key] = f
	return f, nil
}

// run runs ghz on one request file against target and parses its report.
func (g *ghzDriver) run(ctx context.Context, target, file string, limit time.Duration, args ...string) (result, float64, error) {
	if err := CheckLoopback(target); err != nil {
		return result{}, 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	args = append([]string{"--insecure", "--protoset", g.protoset,
		"--binary-file", file, "--connections", "1", "-O", "json"}, args...)
	cmd := exec.CommandContext(ctx, g.bin, append(args, target)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var cpu float64
	if cmd.ProcessState != nil {
		cpu = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	}
	if err != nil && out.Len() == 0 {
		return result{}, cpu, fmt.Errorf("ghz: %v: %s", err, shorten(errOut.String(), 400))
	}
	r, err := ghzResult(out.Bytes())
	return r, cpu, err
}

// ghzCall is w's method as ghz names it: package.Service.Method.
func ghzCall(w workload) string {
	return strings.ReplaceAll(strings.TrimPrefix(w.rpc(), "/"), "/", ".")
}

// ghzReport is the part of ghz's JSON report (-O json) floodbench reads.
type ghzReport struct {
	Count   uint64        `json:"count"`
	Total   time.Duration `json:"total"`
	Details []struct {
		Latency time.Duration `json:"latency"`
		Error   string        `json:"error"`
		Status  string        `json:"status"`
	} `json:"details"`
}

// drive runs ghz against target for one round of cl and returns what it
// measured and the CPU seconds ghz spent sending (its start-up taken off).
// ghz stops at the end of the window and ignores the calls still in flight
// then (--duration-stop ignore); the run is also bounded by a deadline of
// its own.
func (g *ghzDriver) drive(ctx context.Context, target, key string, w workload, cl cell) (result, float64, error) {
	file, err := g.prepare(ctx, target, key, w, cl.rpcTimeout)
	if err != nil {
		return result{}, 0, err
	}
	if cl.atWindow != nil {
		cl.atWindow()
	}
	r, cpu, err := g.run(ctx, target, file.path, cl.window+time.Minute, "--call", ghzCall(w), "-c", strconv.Itoa(cl.conc),
		"-z", cl.window.String(), "--duration-stop", "ignore", "-t", cl.rpcTimeout.String())
	return r, max(cpu-file.startup, 0), err
}

// ghzResult turns ghz's JSON report into a result. ghz sees gRPC status
// codes only, not the CheckResponse inside: the in-process client's run is
// the one that checks every answer.
func ghzResult(report []byte) (result, error) {
	var rep ghzReport
	if err := json.Unmarshal(report, &rep); err != nil {
		return result{}, fmt.Errorf("ghz report: %w", err)
	}
	if uint64(len(rep.Details)) != rep.Count {
		return result{}, fmt.Errorf("ghz report: %d details for %d calls", len(rep.Details), rep.Count)
	}
	var r result
	for _, d := range rep.Details {
		if d.Error != "" || (d.Status != "" && d.Status != "OK") {
			r.rpcErrors++
			if r.firstErr == nil {
				r.firstErr = fmt.Errorf("%s: %s", d.Status, d.Error)
			}
			continue
		}
		r.decisions++
		r.durs = append(r.durs, d.Latency)
	}
	r.window = rep.Total
	slices.Sort(r.durs)
	r.p50, r.p99 = percentile(r.durs, 50), percentile(r.durs, 99)
	return r, nil
}
