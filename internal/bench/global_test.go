package bench

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestGlobalSmoke runs floodbench global briefly on a real redis-server,
// its replicas in-process and as floodgate serve processes: both runs are
// in each table, every decision was made, and neither run admitted more
// than the bucket allowed at any second's end.
func TestGlobalSmoke(t *testing.T) {
	for _, tc := range []struct{ name, floodgate string }{{"in-process", ""}, {"processes", bins.floodgate}} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			o := GlobalOptions{Redis: "redis-server", Duration: 400 * time.Millisecond, Replicas: 3, Capacity: 100, Rate: 1000, Offered: 2, Floodgate: tc.floodgate}
			if err := Global(context.Background(), o, &out); err != nil {
				t.Fatal(err)
			}
			checkGlobalTable(t, out.String())
		})
	}
}

func checkGlobalTable(t *testing.T, out string) {
	t.Helper()
	rows := 0
	for _, line := range strings.Split(out, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 9 || (strings.TrimSpace(cells[1]) != "off" && strings.TrimSpace(cells[1]) != "auto") {
			continue
		}
		rows++
		name := strings.TrimSpace(cells[1])
		over, err := strconv.ParseInt(strings.TrimSpace(cells[6]), 10, 64)
		if err != nil || over > 0 {
			t.Errorf("%s: most over the bound %q", name, cells[6])
		}
		if admitted, _ := strconv.ParseInt(strings.TrimSpace(cells[3]), 10, 64); admitted == 0 {
			t.Errorf("%s: nothing admitted", name)
		}
		if failed := strings.TrimSpace(cells[7]); failed != "0" {
			t.Errorf("%s: %s decisions failed", name, failed)
		}
	}
	if rows != 2 {
		t.Errorf("%d rows, want one without leases and one with:\n%s", rows, out)
	}
}
