package ratelimit

import (
	"testing"

	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/door/ratelimit/rls"
)

// Explain plans against the limits the running door serves: a feed's
// push, which the configuration's files do not hold.
func TestExplainPlansWithTheLimitsAFeedPushed(t *testing.T) {
	d, cfg, feed, _ := fedDoor(t, "  xds: {server: \"cp:18001\", node_id: n}\n")
	req, err := Request("edge", []string{"k=v"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	meets := func(doors []door.Door) rls.Meets {
		p, err := Explain(doors, cfg, req)
		if err != nil {
			t.Fatal(err)
		}
		return p.Items[0].Meets
	}
	if m := meets([]door.Door{d}); m != rls.NoLimit {
		t.Errorf("before the first push: %v, want no limit", m)
	}
	feed.push(edge3)
	if m := meets([]door.Door{d}); m != rls.Bucketed {
		t.Errorf("after the push: %v, want the pushed limit", m)
	}
	if m := meets(nil); m != rls.NoLimit {
		t.Errorf("without the door, the configuration's (no) files: %v", m)
	}
}
