package limiter

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Op is what an Adjustment does to a bucket (to a calendar quota's
// window, what Quota.Count says: an add may go beyond the limit there).
type Op uint8

const (
	// OpRead reads the bucket and changes nothing.
	OpRead Op = iota
	// OpAdd gives N tokens to the bucket, capped at its capacity as a Refund
	// is (a bucket holds no more than full); a negative N takes |N| tokens
	// whatever the bucket holds, into a debt of at most one capacity, as a
	// Charge does.
	OpAdd
	// OpSet makes the bucket hold exactly N tokens, N in [-capacity,
	// capacity] (below 0: a debt of |N|).
	OpSet
	// OpReset makes the bucket full: a bucket never seen.
	OpReset
)

// String names the operation as the admin API spells it.
func (o Op) String() string {
	switch o {
	case OpRead:
		return "read"
	case OpAdd:
		return "add"
	case OpSet:
		return "set"
	case OpReset:
		return "reset"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Adjustment is an operator's change to one bucket (or, with OpRead, a
// look at it) made outside any decision: nothing is spent, no request is
// counted.
type Adjustment struct {
	Op Op
	N  int64 // tokens, for Add and Set
}

// ErrAdjustment wraps an Adjustment a bucket's limit cannot take (a Set
// beyond the capacity, an unknown Op).
var ErrAdjustment = errors.New("limiter: adjustment out of range")

// Check reports an adjustment l cannot take: a Set of more than the
// capacity or of a debt beyond one capacity, an Add of the most negative
// int64, an unknown Op.
func (a Adjustment) Check(l Limit) error {
	return a.check(-l.Capacity, l.Capacity, "the capacity, and a debt of at most one capacity")
}

// check reports an adjustment outside what every limit refuses (an Add of
// the most negative int64, an unknown Op) or a Set outside [low, high],
// which why explains.
func (a Adjustment) check(low, high int64, why string) error {
	switch a.Op {
	case OpRead, OpReset, OpAdd:
		if a.Op == OpAdd && a.N == -1<<63 {
			return fmt.Errorf("%w: add %d", ErrAdjustment, a.N)
		}
		return nil
	case OpSet:
		if a.N > high || a.N < low {
			return fmt.Errorf("%w: set %d is outside [%d, %d] (%s)", ErrAdjustment, a.N, low, high, why)
		}
		return nil
	}
	return fmt.Errorf("%w: unknown operation %v", ErrAdjustment, a.Op)
}

// Missing returns the units a bucket of l misses once a is applied to a
// bucket missing m units now (see Limit: 0 is full, above CapacityUnits in
// debt). Both stores apply it, the Redis store's script with the same
// arithmetic. It never overflows for an a that Check accepts.
func (l Limit) Missing(m int64, a Adjustment) int64 {
	switch a.Op {
	case OpAdd:
		if a.N >= 0 {
			return l.Apply(m, Refund, a.N)
		}
		return l.Apply(m, Charge, -a.N)
	case OpSet:
		return (l.Capacity - a.N) * l.k
	case OpReset:
		return 0
	}
	return m
}

// Balance is one bucket's state, read without spending: what an operator
// answers a caller with.
type Balance struct {
	// Limit is the bucket's capacity.
	Limit int64
	// Remaining is the whole tokens it holds (0 in debt).
	Remaining int64
	// ResetAfter is the time until it is full again.
	ResetAfter time.Duration
	// Debt is the whole tokens it owes (rounded up), 0 unless a Charge or
	// a negative Add took it below empty.
	Debt int64
	// Missing is the exact state: the units missing from full (see Limit;
	// above CapacityUnits in debt), from which Limit.Result says what a
	// request of any cost would meet.
	Missing int64
	// Local marks a store that keeps this replica's buckets only (the
	// in-memory store): another replica's bucket for the same caller is
	// another bucket.
	Local bool
	// Quota marks a calendar quota's window (Request.Quota): Limit is the
	// quota's limit, Remaining what is left to take in the window (above
	// Limit when an operator's Add gave more), Debt the count above the
	// limit, ResetAfter the time to the window's end, Missing the count
	// (below zero for such a credit). WindowStart and WindowEnd are the
	// window, as the store's clock chose it.
	Quota                  bool
	WindowStart, WindowEnd time.Time
}

// Balance is the Balance of a bucket of l missing m units now.
func (l Limit) Balance(m int64) Balance {
	r := l.Result(m, Take, 0, true)
	b := Balance{Limit: l.Capacity, Remaining: r.Remaining, ResetAfter: r.ResetAfter, Missing: m}
	if full := l.CapacityUnits(); m > full {
		b.Debt = ceilDiv(m-full, l.k)
	}
	return b
}

// Adjuster is a Store that can read and adjust one bucket outside any
// decision, for an operator (the admin API's balances and explain). It is
// optional: a store that cannot says so by not implementing it.
//
// Adjust applies a to the bucket req names (req.Name, req.ID, under
// req.Limit, or its quota's current window when req.Quota is set, chosen
// by the store's clock as a decision chooses it, and adjusted as
// Quota.Count says; its Cost, Kind and Lease are not read), atomically with the
// store's decisions on that bucket, and returns the bucket's Balance
// after it. A bucket held under another limit (a reload changed the
// policy's numbers) is converted as a decision would convert it; a Read
// writes nothing, not even that. An error means nothing was changed, or,
// for a store whose reply was lost, that the change may have been made
// (the caller can Read to find out).
type Adjuster interface {
	Adjust(ctx context.Context, req Request, a Adjustment) (Balance, error)
}

// CheckAdjust checks what every Adjuster checks of its input first.
func CheckAdjust(req Request, a Adjustment) error {
	if req.Name == "" || req.ID == "" {
		return fmt.Errorf("%w (name %q, id %q)", ErrKey, req.Name, req.ID)
	}
	if !req.Limit.Valid() {
		return fmt.Errorf("%w (limit not built by NewLimit)", ErrCapacity)
	}
	if req.Quota != nil {
		if err := req.Quota.valid(); err != nil {
			return err
		}
		return a.CheckQuota(req.Quota)
	}
	return a.Check(req.Limit)
}
