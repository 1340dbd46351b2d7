package safefile

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestReadRefusesWhatIsNotABoundedRegularFile(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(small, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		max  int64
		want string // content, or the error's words
		ok   bool
	}{
		{small, 5, "hello", true},
		{link, 5, "hello", true},
		{small, 4, "larger than 4 bytes", false},
		{dir, 1 << 20, "not a regular file", false},
		{fifo, 1 << 20, "not a regular file", false},
		{"/dev/zero", 1 << 20, "not a regular file", false},
		{filepath.Join(dir, "missing"), 1, "no such file", false},
	} {
		done := make(chan struct{})
		var got []byte
		var err error
		go func() { got, err = Read(tc.path, tc.max); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("Read(%s) blocked", tc.path)
		}
		switch {
		case tc.ok && (err != nil || string(got) != tc.want):
			t.Errorf("Read(%s, %d) = %q, %v; want %q", tc.path, tc.max, got, err, tc.want)
		case !tc.ok && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("Read(%s, %d) = %q, %v; want an error saying %q", tc.path, tc.max, got, err, tc.want)
		}
	}
}
