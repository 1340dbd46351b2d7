package redisstore

import (
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
)

// TestTheClientCertHint: a connection reset or broken pipe, the way a
// server requiring client certificates may drop a client without one,
// gains the hint and stays what it was; the server's own alert, other
// errors and nil pass unchanged.
func TestTheClientCertHint(t *testing.T) {
	reset := &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.ECONNRESET)}
	for _, err := range []error{reset, &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}} {
		h := withClientCertHint(err)
		if !strings.Contains(h.Error(), "cert_file") || !errors.Is(h, err) {
			t.Errorf("%v became %v: want the hint, wrapping the error", err, h)
		}
	}
	for _, err := range []error{errors.New("remote error: tls: certificate required"), errors.New("WRONGTYPE"), nil} {
		if h := withClientCertHint(err); h != err {
			t.Errorf("%v became %v: want it unchanged", err, h)
		}
	}
}
