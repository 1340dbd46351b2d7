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

	"github.com/floodgate/floodgate/internal/config"
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

// heapHeadroom is what the process may hold besides its in-memory buckets
// (gRPC's buffers, the policies, the garbage of the Checks in flight) under
// the memory limit set from them.
const heapHeadroom = 64 << 20

// outsideGoLimit is what a container's memory holds beyond Go's memory
// limit: the binary's code and data as resident pages, and the freed heap
// the scavenger has not yet given back when garbage comes fast. Under a
// flood of large Checks RSS stood 19 to 25 MiB above the limit
// (TestALargeCheckFloodLeavesOrdinaryChecksExact), so a limit of 0.9 of a
// 256 Mi container (230 MiB) left the process within 1 MiB of the OOM
// killer. The limit set from a container's is at most its limit less this.
const outsideGoLimit = 48 << 20

// containerGoLimit is the Go memory limit for a container limited to l
// bytes: ratio of it, at most l less outsideGoLimit, and at least half of l
// (a container too small for the allowance still gets a limit to hold).
func containerGoLimit(l int64, ratio float64) (int64, string) {
	byRatio := int64(float64(l) * ratio)
	switch m := max(l-outsideGoLimit, l/2); {
	case m < byRatio:
		return m, fmt.Sprintf("the container's limit of %d bytes less %d MiB (the code and the heap not yet returned, which Go's limit does not hold), below %.2f of it",
			l, (l-m)>>20, ratio)
	default:
		return byRatio, fmt.Sprintf("%.2f of the container's limit of %d bytes", ratio, l)
	}
}

// planGC decides from the configuration, the environment (getenv), the
// container's memory limit (cgroupLimit, 0 when there is none) and the most
// the in-memory buckets can hold (store.MemoryBytes, 0 without an in-memory store).
//
// The memory limit is what holds the process: GOGC lets the heap grow to
// several times what is live, and under a flood of distinct callers what is
// live is mostly the bucket tables, so without a limit the process would
// grow to several times memory.max_buckets' worth. In a container the limit
// is memory_limit_ratio of the container's (containerGoLimit); outside one, with an in-memory
// store, it is storeBytes plus heapHeadroom.
func planGC(rt config.Runtime, storeBytes int64, getenv func(string) (string, bool), cgroupLimit func() int64) gcPlan {
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
	switch l := cgroupLimit(); {
	case l > 0:
		p.memLimit, p.limitFrom = containerGoLimit(l, *rt.MemoryLimitRatio)
	case storeBytes > 0:
		p.memLimit = storeBytes + heapHeadroom
		p.limitFrom = fmt.Sprintf("the in-memory buckets at memory.max_buckets (%d bytes) + %d MiB (no container memory limit)", storeBytes, heapHeadroom>>20)
	default:
		p.limitFrom = "none (no container memory limit)"
		return p
	}
	p.limit = strconv.FormatInt(p.memLimit, 10)
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
