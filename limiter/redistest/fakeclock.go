package redistest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FakeClock is the clock of a redis-server run under libfaketime (Debian's
// faketime package, preloaded): Redis' TIME, and its keys' expiry, read
// the time Set last put it at, running on from there. It is how a test
// controls the clock a Redis script reads, which nothing else can inject.
//
// Debian's redis-server allocates with the system's libjemalloc, which
// libfaketime cannot start beside (jemalloc reads the clock while
// libfaketime sets itself up: wolfcw/libfaketime issue 130), so the server
// also preloads a shim of a few lines, compiled here with cc, that hands
// its allocations to glibc's malloc.
type FakeClock struct {
	lib, shim, file string
}

// mallocShim routes redis-server's allocations to glibc's allocator: with
// jemalloc out of the way, libfaketime starts.
const mallocShim = `#define _GNU_SOURCE
#include <stddef.h>
#include <errno.h>
#include <dlfcn.h>
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);
void *malloc(size_t n) { return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { return __libc_realloc(p, n); }
void free(void *p) { __libc_free(p); }
void *memalign(size_t a, size_t n) { return __libc_memalign(a, n); }
void *aligned_alloc(size_t a, size_t n) { return __libc_memalign(a, n); }
int posix_memalign(void **out, size_t a, size_t n) {
	void *p = __libc_memalign(a, n);
	if (!p) return ENOMEM;
	*out = p;
	return 0;
}
size_t malloc_usable_size(void *p) {
	static size_t (*real)(void *);
	if (!real) real = (size_t (*)(void *))dlsym(dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD), "malloc_usable_size");
	return real(p);
}
`

// libfaketimePaths are where Debian and Ubuntu install the multithreaded
// libfaketime (redis-server runs threads).
var libfaketimePaths = []string{
	"/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
	"/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
	"/usr/lib/faketime/libfaketimeMT.so.1",
}

// NewFakeClock finds libfaketime, or fails t with what to install, and
// returns a clock reading the real time until Set. Give it to StartWith in
// Config.FakeClock.
func NewFakeClock(t testing.TB) *FakeClock {
	t.Helper()
	lib := ""
	for _, p := range libfaketimePaths {
		if _, err := os.Stat(p); err == nil {
			lib = p
			break
		}
	}
	if lib == "" {
		if m, _ := filepath.Glob("/usr/lib/*/faketime/libfaketimeMT.so.1"); len(m) > 0 {
			lib = m[0]
		}
	}
	if lib == "" {
		t.Fatalf("libfaketimeMT.so.1 not found (looked in %v and /usr/lib/*/faketime/): this test runs redis-server under a faked clock; install Debian's faketime package with `apt-get install faketime` (`make redis` does this when run as root on Debian/Ubuntu)", libfaketimePaths)
	}
	dir := t.TempDir()
	c := &FakeClock{lib: lib, shim: filepath.Join(dir, "libcmalloc.so"), file: filepath.Join(dir, "faketime")}
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Fatalf("cc not found in PATH: a faked clock under redis-server needs a C compiler to build its malloc shim (see FakeClock); install it with `apt-get install gcc`")
	}
	src := filepath.Join(dir, "libcmalloc.c")
	if err := os.WriteFile(src, []byte(mallocShim), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-o", c.shim, src, "-ldl").CombinedOutput(); err != nil {
		t.Fatalf("compiling the malloc shim for libfaketime: %v\n%s", err, strings.TrimSpace(string(out)))
	}
	c.write(t, "+0")
	return c
}

// Set puts Redis' clock at at: from now on it reads at plus the real time
// gone since (to the microsecond, give or take the time Set takes).
func (c *FakeClock) Set(t testing.TB, at time.Time) {
	t.Helper()
	c.write(t, fmt.Sprintf("%+.6f", time.Until(at).Seconds()))
}

// write replaces the offset file in one step: libfaketime re-reads it at
// every clock call and must never see half of it.
func (c *FakeClock) write(t testing.TB, offset string) {
	t.Helper()
	tmp := c.file + ".new"
	if err := os.WriteFile(tmp, []byte(offset+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, c.file); err != nil {
		t.Fatal(err)
	}
}

// env is what redis-server's environment needs to read the clock.
func (c *FakeClock) env() []string {
	return []string{
		"LD_PRELOAD=" + c.shim + " " + c.lib,
		"FAKETIME_TIMESTAMP_FILE=" + c.file,
		"FAKETIME_NO_CACHE=1",            // read the file at every call: Set applies at once
		"FAKETIME_DONT_FAKE_MONOTONIC=1", // Redis' timers keep the real monotonic clock
	}
}
