package redisstore

import (
	"context"

	"github.com/floodgate/floodgate/limiter"
)

// Sharded reports whether the store's buckets live on several servers: on
// a Redis Cluster (resilient.Sharded).
func (s *Store) Sharded() bool { return s.cluster != nil }

// Shards appends to dst the address of each Redis Cluster master holding a
// bucket of reqs, each once, as the client's slot map has it now, and
// returns it. Outside a Cluster (one server decides everything) it appends
// nothing, as it does for a bucket whose master the slot map cannot tell.
// The resilience layer keeps a circuit breaker per address it returns
// (resilient.Sharded), so one master down degrades only the decisions whose
// buckets live on it. After a failover the same slots name the promoted
// replica's address.
func (s *Store) Shards(ctx context.Context, reqs []limiter.Request, dst []string) []string {
	if s.cluster == nil {
		return dst
	}
	first := len(dst)
next:
	for i := range reqs {
		addr := s.masterOf(ctx, s.Key(reqs[i].Name, reqs[i].ID))
		if addr == "" {
			continue
		}
		for _, a := range dst[first:] {
			if a == addr {
				continue next
			}
		}
		dst = append(dst, addr)
	}
	return dst
}

// masterOf is the address of the master serving key on a Cluster, or ""
// (outside a Cluster, or before the client has read the slot map). It
// never waits for the network: go-redis reads the slot map, within ctx,
// only the first time it is asked, so until a decision (bounded by its
// deadline) or CheckServer has made it read it, masterOf does not ask.
func (s *Store) masterOf(ctx context.Context, key string) string {
	if s.cluster == nil || !s.slotsKnown.Load() {
		return ""
	}
	node, err := s.cluster.MasterForKey(ctx, key)
	if err != nil {
		return ""
	}
	return node.Options().Addr
}

// NodeError is the error of the part of a decision that ran on one Redis
// Cluster master and failed there (a decision across slots runs a script
// call per slot): Shard names the master as Shards does, so that the
// failure counts against that master's breaker alone.
type NodeError struct {
	Node string
	Err  error
}

func (e *NodeError) Error() string { return e.Err.Error() + " (on " + e.Node + ")" }

func (e *NodeError) Unwrap() error { return e.Err }

// Shard is the master the error happened on.
func (e *NodeError) Shard() string { return e.Node }

// onNode wraps err as having happened on the master serving key, when the
// slot map can tell which; otherwise it returns err.
func (s *Store) onNode(ctx context.Context, key string, err error) error {
	if addr := s.masterOf(context.WithoutCancel(ctx), key); addr != "" {
		return &NodeError{Node: addr, Err: err}
	}
	return err
}
