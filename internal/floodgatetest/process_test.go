package floodgatetest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// recordTB is a testing.TB that keeps its errors, so a test can check what
// a helper reports.
type recordTB struct {
	testing.TB
	errs []string
}

func (r *recordTB) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestStopReportsAnEarlyExitAsItWas: a floodgate that exited on its own
// (here: its config file is missing) is reported as exited with its status,
// at once, not as "did not exit within 15s of SIGTERM".
func TestStopReportsAnEarlyExitAsItWas(t *testing.T) {
	p, _ := launch(t, Floodgate(t, Build{}), "serve", "--config", filepath.Join(t.TempDir(), "missing.yaml"))
	<-p.done // not through Wait: as if no test had looked
	rec := &recordTB{TB: t}
	p.Stop(rec)
	if len(rec.errs) != 1 || !strings.HasPrefix(rec.errs[0], "floodgate exited on its own with exit status 1") {
		t.Fatalf("Stop reported %q, want one error saying it exited on its own with exit status 1", rec.errs)
	}
	p.Stop(rec) // a second Stop (the cleanup's, say) neither waits nor repeats the report
	if _, exited := p.Wait(0); !exited || len(rec.errs) != 1 {
		t.Fatalf("after a second Stop: %q", rec.errs)
	}
}
