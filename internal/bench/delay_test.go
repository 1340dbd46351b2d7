package bench

import (
	"io"
	"net"
	"testing"
	"time"
)

// The delaying proxy adds its round trip to a connection to target
// (netfault's tests hold the precision and the order), and refuses a target
// off loopback or a round trip of nothing.
func TestStartDelayAddsTheRoundTripOnLoopbackOnly(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	const rtt = 2 * time.Millisecond
	p, err := startDelay(ln.Addr().String(), rtt)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	t0 := time.Now()
	if _, err := io.WriteString(c, "ping"); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(t0); took < rtt {
		t.Errorf("a round trip through the proxy took %v, below the %v it adds", took, rtt)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := startDelay("192.0.2.1:6379", time.Millisecond); err == nil {
		t.Error("a proxy to an address off loopback")
	}
	if _, err := startDelay(ln.Addr().String(), 0); err == nil {
		t.Error("a proxy adding no round trip")
	}
}
