package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/floodgate/floodgate/cmd/floodgate/config"
)

// gcPlan is what serve does to Go's collector at start, and why: the
// configuration's runtime section, unless the standard environment
// variables already say otherwise.
type gcPlan struct {
	gcPercent int    // -1: leave it (GOGC is set)
	gogc      string // the GOGC in force, for the log
	gcFrom    string // "runtime.gogc" or "GOGC"
	memLimit  int64  // 0: leave it
	limit     string // the memory limit in force, for the log
	limitFrom string // what decided the memory limit, for the log
}

// planGC decides from the configuration, the environment (getenv) and the
// container's memory limit (cgroupLimit, 0 when there is none).
func planGC(rt config.Runtime, getenv func(string) (string, bool), cgroupLimit func() int64) gcPlan {
	p := gcPlan{gcPercent: -1, gcFrom: "GOGC", limit: "unchanged"}
	if v, ok := getenv("GOGC"); ok {
		p.gogc = v
	} else if rt.GOGC != nil {
		p.gcPercent, p.gogc, p.gcFrom = *rt.GOGC, strconv.Itoa(*rt.GOGC), "runtime.gogc"
	}
	if v, ok := getenv("GOMEMLIMIT"); ok {
		p.limit, p.limitFrom = v, "GOMEMLIMIT"
		return p
	}
	if rt.MemoryLimitRatio == nil || *rt.MemoryLimitRatio == 0 {
		p.limitFrom = "none (runtime.memory_limit_ratio: 0)"
		return p
	}
	if l := cgroupLimit(); l > 0 {
		p.memLimit = int64(float64(l) * *rt.MemoryLimitRatio)
		p.limit = strconv.FormatInt(p.memLimit, 10)
		p.limitFrom = fmt.Sprintf("%.2f of the container's limit of %d bytes", *rt.MemoryLimitRatio, l)
	} else {
		p.limitFrom = "none (no container memory limit)"
	}
	return p
}

// fields describe p for the start-up log.
func (p gcPlan) fields() []zap.Field {
	return []zap.Field{zap.String("gogc", p.gogc), zap.String("gogc_from", p.gcFrom),
		zap.String("memory_limit", p.limit), zap.String("memory_limit_from", p.limitFrom)}
}

// apply sets what p decided.
func (p gcPlan) apply() {
	if p.gcPercent > 0 {
		debug.SetGCPercent(p.gcPercent)
	}
	if p.memLimit > 0 {
		debug.SetMemoryLimit(p.memLimit)
	}
}

// unlimited is where cgroup v1 reports "no limit" (a page-rounded
// MaxInt64); anything this large is no limit.
const unlimited = 1 << 60

// cgroupMemoryLimit is the memory limit of this process's cgroup in bytes,
// 0 when there is none or it cannot be read. cgroup v2: memory.max under the
// path /proc/self/cgroup names ("0::/path"); cgroup v1: the memory
// controller's memory.limit_in_bytes under its path ("N:memory:/path").
// Each also at the root of /sys/fs/cgroup, which is where a container with
// its own cgroup namespace finds its own.
func cgroupMemoryLimit() int64 {
	return readCgroupLimit("/proc/self/cgroup", "/sys/fs/cgroup")
}

func readCgroupLimit(selfCgroup, root string) int64 {
	var candidates []string
	if b, err := os.ReadFile(selfCgroup); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) != 3 {
				continue
			}
			path := filepath.Clean("/" + parts[2])
			switch {
			case parts[0] == "0" && parts[1] == "":
				candidates = append(candidates, filepath.Join(root, path, "memory.max"))
			case slices.Contains(strings.Split(parts[1], ","), "memory"):
				candidates = append(candidates, filepath.Join(root, "memory", path, "memory.limit_in_bytes"))
			}
		}
	}
	candidates = append(candidates, filepath.Join(root, "memory.max"), filepath.Join(root, "memory", "memory.limit_in_bytes"))
	for _, f := range candidates {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 || n >= unlimited {
			return 0
		}
		return n
	}
	return 0
}
