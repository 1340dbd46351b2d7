package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWakeupsExitCodes: floodbench wakeups without files is a usage error
// (2); a file that is not a trace exits 1, naming the file.
func TestWakeupsExitCodes(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"wakeups"}, &out, &errOut); code != 2 {
		t.Errorf("no files: exit %d, want 2", code)
	}
	bad := filepath.Join(t.TempDir(), "bad.trace")
	if err := os.WriteFile(bad, []byte("not a trace"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code := run(context.Background(), []string{"wakeups", bad}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "bad.trace") {
		t.Errorf("a file that is not a trace: exit %d, %q; want 1 and the file named", code, errOut.String())
	}
}
