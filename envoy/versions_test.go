package envoy

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// needsEnvoy lists fields and formatters of the shipped configurations by the Envoy release that
// introduced them: an older Envoy rejects the file. JA4: tls_inspector's enable_ja4_fingerprinting and
// the %TLS_JA4_FINGERPRINT% formatter arrived in 1.35 (Envoy 1.34 rejects both).
var needsEnvoy = []struct {
	marker string
	minor  int // 1.minor
}{
	{"enable_ja4_fingerprinting", 35},
	{"%TLS_JA4_FINGERPRINT%", 35},
}

// TestVersionNotesAreStated: a configuration that needs a newer Envoy than most says so in its own
// comments and in envoy/README.md, and the Envoy that e2e/docker-compose.yaml runs is new enough for
// every file it mounts.
func TestVersionNotesAreStated(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	compose, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`image: envoyproxy/envoy:v1\.(\d+)\.\d+`).FindSubmatch(compose)
	if m == nil {
		t.Fatalf("%s pins no envoyproxy/envoy:v1.N.M image", composeFile)
	}
	composeMinor, _ := strconv.Atoi(string(m[1]))
	checked := 0
	for _, ex := range examples {
		src, err := os.ReadFile(ex.envoy)
		if err != nil {
			t.Fatal(err)
		}
		need := 0
		for _, n := range needsEnvoy {
			if strings.Contains(string(src), n.marker) && n.minor > need {
				need = n.minor
			}
		}
		if need == 0 {
			continue
		}
		checked++
		note := "Envoy >= 1." + strconv.Itoa(need)
		if !strings.Contains(comments(string(src)), note) {
			t.Errorf("%s needs %s but its comments do not say %q", ex.envoy, note, note)
		}
		if !strings.Contains(string(readme), note) {
			t.Errorf("envoy/README.md does not say %q (for %s)", note, ex.envoy)
		}
		if !ex.notInCompose && composeMinor < need {
			t.Errorf("%s runs Envoy 1.%d, but %s needs %s", composeFile, composeMinor, ex.envoy, note)
		}
	}
	if checked == 0 {
		t.Fatal("no shipped configuration uses a versioned feature: the test tests nothing")
	}
}

// comments returns the YAML comments of src, one per line.
func comments(src string) string {
	var b strings.Builder
	for _, line := range strings.Split(src, "\n") {
		if i := strings.Index(line, "#"); i >= 0 {
			b.WriteString(line[i:])
			b.WriteByte('\n')
		}
	}
	return b.String()
}
