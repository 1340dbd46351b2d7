package doors

import (
	"errors"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/limiter/fielderr"
)

// FuzzParse: any bytes give either a compiled configuration or a
// fielderr.List, each naming the file; never a panic, never both, never
// neither.
func FuzzParse(f *testing.F) {
	f.Add(config.DefaultYAML())
	f.Add([]byte(goodPolicy))
	f.Add([]byte("store:\n  backend: redis\n  redis: {addresses: [a:1], timeout: 5s}\npolicies:\n  - {name: x, key: [\"metadata:a:b.c\", fingerprint], fingerprint_headers: [ua], capacity: 3, refill_per_second: 1/7}\n"))
	f.Add([]byte("policies: [{name: a, match: {protocol: tcp, headers: [{name: x, present: false}]}, key: [client_ip], capacity: 1.5, refill_per_second: NaN}]"))
	f.Add([]byte("&a [*a]"))
	f.Add([]byte("policies:\n  - &p {name: a, capacity: 1, refill_per_second: 1, key: [client_ip, client_ip]}\n  - *p\n  - *p\n"))
	f.Add([]byte(goodPolicy + "---\npolicies: []\n"))
	f.Add([]byte("listen: {max_concurrent_streams: 4294967297}\npolicies: [{name: a, key: [client_ip], capacity: 99999999999999999999, refill_per_second: 1e308}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<16 {
			return
		}
		c, err := Parse("fuzz.yaml", data)
		if (c == nil) == (err == nil) {
			t.Fatalf("Parse returned config %v and error %v", c != nil, err)
		}
		if err != nil {
			var ps fielderr.List
			if !errors.As(err, &ps) || len(ps) == 0 {
				t.Fatalf("error is not a fielderr.List: %v", err)
			}
			for _, p := range ps {
				if p.File != "fuzz.yaml" || !strings.HasPrefix(p.Error(), "fuzz.yaml") {
					t.Fatalf("problem without its file: %q", p)
				}
			}
			return
		}
		if c.Engine == nil || len(c.Engine.Policies) != len(c.Policies) {
			t.Fatal("a valid config without its compiled policies")
		}
	})
}
