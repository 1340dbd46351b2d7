package callgrind

import (
	"os"
	"strings"
	"testing"
)

// readCallgrind on callgrind's own files: testdata holds the head
// and the last line of callgrind's output for /bin/true with
// --cache-sim=yes (nine events, a summary at the top and totals at the end
// that differ by a little, as callgrind writes them), and the head of a dump
// callgrind_control asked a running floodgate for (cost lines cut short:
// no totals line, the summary stands).
func TestReadCallgrind(t *testing.T) {
	for _, tc := range []struct {
		file, trigger string
		want          map[string]uint64
	}{
		{"true-cachesim.callgrind", "Program termination", map[string]uint64{"Ir": 126389, "Dr": 27864, "Dw": 11767, "I1mr": 1082, "DLmw": 547}},
		{"floodgate-dump-head.callgrind", "dump floodbench-1", map[string]uint64{"Ir": 3539267}},
	} {
		f, err := os.Open("testdata/" + tc.file)
		if err != nil {
			t.Fatal(err)
		}
		d, err := readCallgrind(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if d.trigger != tc.trigger {
			t.Errorf("%s: trigger %q, want %q", tc.file, d.trigger, tc.trigger)
		}
		for ev, want := range tc.want {
			if got, ok := d.count(ev); !ok || got != want {
				t.Errorf("%s: %s = %d (%v), want %d", tc.file, ev, got, ok, want)
			}
		}
		if _, ok := d.count("Bc"); ok {
			t.Errorf("%s: an event it does not count has a total", tc.file)
		}
	}

	// The format's rules, on small files: a totals line shorter than the
	// events leaves the rest at 0; a summary without totals stands.
	d, err := readCallgrind(strings.NewReader("# callgrind format\nversion: 1\nevents: Ir Dr\nfn=(1) main\n16 20 3\ntotals: 20\n"))
	if n, _ := d.count("Dr"); err != nil || n != 0 {
		t.Errorf("a totals line without Dr: Dr %d, %v; want 0", n, err)
	}
	if n, _ := d.count("Ir"); n != 20 {
		t.Errorf("Ir %d, want 20", n)
	}
	for name, in := range map[string]string{
		"not callgrind's":  "hello\nsummary: 3\n",
		"another version":  "# callgrind format\nversion: 2\nevents: Ir\nsummary: 3\n",
		"no events":        "# callgrind format\nversion: 1\nsummary: 3\n",
		"no totals":        "# callgrind format\nversion: 1\nevents: Ir\nfn=(1) main\n16 20\n",
		"a count that not": "# callgrind format\nversion: 1\nevents: Ir\nsummary: 3x\n",
		"too many totals":  "# callgrind format\nversion: 1\nevents: Ir\ntotals: 3 4\n",
	} {
		if _, err := readCallgrind(strings.NewReader(in)); err == nil {
			t.Errorf("%s: read without an error", name)
		}
	}
}
