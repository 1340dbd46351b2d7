// Package admission bounds the bytes of requests a server reads and
// handles at once. grpc.MaxRecvMsgSize bounds one message; with many
// streams each reading a message near that size, nothing bounds their sum,
// and the process can grow to gigabytes. A Budget is taken, for each
// message's declared length, before the message is read, and given back
// once its RPC has been answered.
//
// Why before reading, and how: grpc-go's transport holds at most a stream's
// flow-control window of a message (64 KiB with StreamWindow) until the
// handler asks for the message; asking for it (parser.recvMsg in grpc-go's
// rpc_util.go) reads the 5-byte length prefix and at once grants the sender
// a window of the whole message (inFlow.maybeAdjust, internal/transport/
// flowcontrol.go), then reads all of it. No interceptor, codec or stats
// handler runs between the prefix and the body. So a Budget's handlers read
// the message themselves, through the ServerTransportStream grpc-go puts in
// every RPC's context (its ReadMessageHeader and Read, the calls the parser
// makes): the prefix first, then the budget for that many bytes, then the
// body, then the codec. The requests of an HTTP server draw on the same
// Budget (HTTPGate, http.go), counted as net/http reads them.
package admission

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Budget is a count of bytes that requests in flight may hold. Requests
// that fit go at once, whatever waits (a small Check is never queued
// behind a large one); a request larger than the whole budget takes all of
// it.
type Budget struct {
	limit int64
	used  atomic.Int64

	waiters atomic.Int32 // goroutines waiting for bytes
	mu      sync.Mutex
	freed   chan struct{} // closed, and replaced under mu, when bytes are given back while some wait
}

// NewBudget returns a budget of limit bytes (at least 1).
func NewBudget(limit int64) *Budget {
	return &Budget{limit: max(limit, 1), freed: make(chan struct{})}
}

// Limit is the budget's size in bytes.
func (b *Budget) Limit() int64 { return b.limit }

// InUse is the bytes taken now.
func (b *Budget) InUse() int64 { return b.used.Load() }

// Take takes n bytes (the whole budget when n exceeds it), waiting up to
// wait, or until ctx ends, for them to be free. It returns the bytes taken,
// to give back with Give, and false when they did not become free in time.
func (b *Budget) Take(ctx context.Context, n int64, wait time.Duration) (int64, bool) {
	n = min(max(n, 0), b.limit)
	if b.tryTake(n) {
		return n, true
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for expired := false; ; {
		b.mu.Lock()
		b.waiters.Add(1)
		freed := b.freed
		b.mu.Unlock()
		// Looked at again once registered: a Give that saw no waiter gave
		// its bytes back before this look.
		ok := b.tryTake(n)
		if !ok {
			select {
			case <-freed:
			case <-timer.C:
				expired = true
			case <-ctx.Done():
				expired = true
			}
		}
		b.waiters.Add(-1)
		if ok || b.tryTake(n) {
			return n, true
		}
		if expired {
			return 0, false
		}
	}
}

// TakeNow takes n bytes at once, over the limit if need be. For what is
// held whatever the budget says (a request no larger than a stream's
// window, which its sender has sent already): counted, never waiting.
func (b *Budget) TakeNow(n int64) int64 {
	n = max(n, 0)
	b.used.Add(n)
	return n
}

func (b *Budget) tryTake(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// Give gives back n bytes taken with Take.
func (b *Budget) Give(n int64) {
	if n == 0 {
		return
	}
	b.used.Add(-n)
	if b.waiters.Load() == 0 {
		return
	}
	b.mu.Lock()
	close(b.freed)
	b.freed = make(chan struct{})
	b.mu.Unlock()
}
