// Package safefile reads the files an operator names (a configuration, a
// rate limit file, a secret) the one safe way: a regular file (symlinks
// followed) of bounded size. A device, FIFO or directory is refused without
// reading from it, so /dev/zero or a pipe nobody writes cannot exhaust
// memory or hang the caller — floodgate validate, serve, or a reload in a
// running server.
package safefile

import (
	"fmt"
	"io"
	"os"
	"syscall"
)

// Read returns the content of the regular file at path, at most max bytes;
// a larger file is an error that says so.
func Read(path string, max int64) ([]byte, error) {
	// O_NONBLOCK: opening a FIFO without a writer would otherwise block.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%v)", path, fi.Mode().Type())
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s: larger than %d bytes, the most it may hold", path, max)
	}
	return data, nil
}
