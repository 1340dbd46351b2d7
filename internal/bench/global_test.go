package bench

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestGlobalSmoke runs floodbench global briefly on a real redis-server:
// both runs are in the table, and neither admitted more than the bucket
// allowed at any second's end.
func TestGlobalSmoke(t *testing.T) {
	var out bytes.Buffer
	o := GlobalOptions{Redis: "redis-server", Duration: 400 * time.Millisecond, Replicas: 3, Capacity: 100, Rate: 1000, Offered: 2}
	if err := Global(context.Background(), o, &out); err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, line := range strings.Split(out.String(), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 8 || (strings.TrimSpace(cells[1]) != "off" && strings.TrimSpace(cells[1]) != "auto") {
			continue
		}
		rows++
		over, err := strconv.ParseInt(strings.TrimSpace(cells[6]), 10, 64)
		if err != nil || over > 0 {
			t.Errorf("%s: most over the bound %q", strings.TrimSpace(cells[1]), cells[6])
		}
		if admitted, _ := strconv.ParseInt(strings.TrimSpace(cells[3]), 10, 64); admitted == 0 {
			t.Errorf("%s: nothing admitted", strings.TrimSpace(cells[1]))
		}
	}
	if rows != 2 {
		t.Errorf("%d rows, want one without leases and one with:\n%s", rows, out.String())
	}
}
