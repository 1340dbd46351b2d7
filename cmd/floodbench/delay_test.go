package main

import (
	"bufio"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

// echoServer answers every line with the same line, on a free loopback
// port, until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
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
	return ln.Addr().String()
}

// roundTrip sends one line on c and reads it back, timed.
func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, line string) time.Duration {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	t0 := time.Now()
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		t.Fatal(err)
	}
	got, err := r.ReadString('\n')
	d := time.Since(t0)
	if err != nil || got != line+"\n" {
		t.Fatalf("echo of %q: %q, %v", line, got, err)
	}
	return d
}

// TestDelayProxyAddsItsRoundTrip: round trips through the proxy, measured
// against the same echo server reached directly (the two taking turns, so
// the machine's load falls on both alike), each take at least the round
// trip the proxy adds, and their median is longer than the direct one's by
// at least as much. Only a lower bound: how much longer the machine makes
// it is not the proxy's to promise.
func TestDelayProxyAddsItsRoundTrip(t *testing.T) {
	echo := echoServer(t)
	for _, rtt := range []time.Duration{500 * time.Microsecond, time.Millisecond} {
		p, err := newDelayProxy(echo, rtt)
		if err != nil {
			t.Fatal(err)
		}
		direct, err := net.Dial("tcp", echo)
		if err != nil {
			t.Fatal(err)
		}
		proxied, err := net.Dial("tcp", p.addr())
		if err != nil {
			t.Fatal(err)
		}
		dr, pr := bufio.NewReader(direct), bufio.NewReader(proxied)
		const n = 60
		var ds, ps []time.Duration
		for i := 0; i < n; i++ {
			ds = append(ds, roundTrip(t, direct, dr, "ping"))
			ps = append(ps, roundTrip(t, proxied, pr, "ping"))
		}
		slices.Sort(ds)
		slices.Sort(ps)
		if ps[0] < rtt {
			t.Errorf("rtt %v: the fastest round trip through the proxy took %v", rtt, ps[0])
		}
		if added := ps[n/2] - ds[n/2]; added < rtt {
			t.Errorf("rtt %v: median through the proxy %v, direct %v: %v added, want at least %v", rtt, ps[n/2], ds[n/2], added, rtt)
		}
		t.Logf("rtt %v: median direct %v, through the proxy %v", rtt, ds[n/2], ps[n/2])
		direct.Close()
		proxied.Close()
		if err := p.close(); err != nil {
			t.Fatal(err)
		}
	}
}

// Pipelined writes come out whole and in order (a Redis pipeline must), and
// closing the proxy ends the connections it forwards.
func TestDelayProxyKeepsOrderAndCloses(t *testing.T) {
	p, err := newDelayProxy(echoServer(t), 2*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var want strings.Builder
	for i := 0; i < 200; i++ {
		want.WriteString(strings.Repeat(string(rune('a'+i%26)), 1+i*37%500) + "\n")
	}
	go io.WriteString(c, want.String())
	c.SetDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, want.Len())
	if _, err := io.ReadFull(c, got); err != nil || string(got) != want.String() {
		t.Fatalf("read back %d bytes (%v), not the %d written in order", len(got), err, want.Len())
	}
	if err := p.close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("a forwarded connection still open after close")
	}
	if _, err := newDelayProxy("192.0.2.1:6379", time.Millisecond); err == nil {
		t.Error("a proxy to an address off loopback")
	}
}
