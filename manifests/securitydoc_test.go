package manifests

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

const securityDoc = "../docs/security.md"

// TestSecurityDocFloodgateSideOfGatewayMTLS: the Floodgate side of the Envoy Gateway recipe in
// docs/security.md works as written. Its listen.tls block, put under listen: in configmap.yaml's
// floodgate.yaml, passes Floodgate's validation; its files are the keys of the Secret the doc creates,
// under the mount path it gives; the server certificate names the BackendTLSPolicy's hostname; and
// allowed_sans lists the identity the doc issues Envoy's client certificate for.
func TestSecurityDocFloodgateSideOfGatewayMTLS(t *testing.T) {
	doc, err := os.ReadFile(securityDoc)
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	block := regexp.MustCompile("(?s)\n( *)```yaml\n( *tls:\n.*?)\n *```").FindStringSubmatch(text)
	if block == nil {
		t.Fatalf("%s has no ```yaml block starting with tls:", securityDoc)
	}
	yamlBlock := regexp.MustCompile("(?m)^"+block[1]).ReplaceAllString(block[2], "") + "\n"
	secret := regexp.MustCompile(`create secret generic floodgate-tls((?: --from-file=[^ \n]+)+)`).FindStringSubmatch(text)
	mount := regexp.MustCompile(`mountPath: (/[^,\s}]+)`).FindStringSubmatch(text)
	identity := regexp.MustCompile("client\\s+certificate naming an identity of your choice \\(say `([^`]+)`\\)").FindStringSubmatch(text)
	serverName := regexp.MustCompile("server certificate naming `([^`]+)`").FindStringSubmatch(text)
	if secret == nil || mount == nil || identity == nil || serverName == nil {
		t.Fatalf("%s: the Envoy Gateway steps no longer name the Secret, the mount path, Envoy's identity or Floodgate's name: update this test", securityDoc)
	}
	var keys []string
	for _, f := range strings.Fields(secret[1]) {
		k, _, _ := strings.Cut(strings.TrimPrefix(f, "--from-file="), "=")
		keys = append(keys, k)
	}

	b, err := load(readFiles(t))
	if err != nil {
		t.Fatal(err)
	}
	cm := named[*corev1.ConfigMap](b, "floodgate-config")
	base := cm.Data[path.Base(configPath)]
	if !strings.Contains(base, "\nlisten:\n") && !strings.HasPrefix(base, "listen:\n") {
		t.Fatal("configmap.yaml's floodgate.yaml has no listen: section")
	}
	// The files: stand-ins under a temporary directory in place of the mount path.
	dir := t.TempDir()
	for _, m := range regexp.MustCompile(`(?m)^\s*\w+_file: (\S+)$`).FindAllStringSubmatch(yamlBlock, -1) {
		file := m[1]
		if path.Dir(file) != mount[1] {
			t.Errorf("%s: %s is not under the mount path %s", securityDoc, file, mount[1])
		}
		if !slices.Contains(keys, path.Base(file)) {
			t.Errorf("%s: %s is not a key of the Secret the doc creates (%v)", securityDoc, path.Base(file), keys)
		}
		if err := os.WriteFile(filepath.Join(dir, path.Base(file)), []byte("stand-in"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	indented := "  " + strings.ReplaceAll(strings.TrimRight(yamlBlock, "\n"), "\n", "\n  ") + "\n"
	data := strings.Replace(base, "listen:\n", "listen:\n"+indented, 1)
	data = strings.ReplaceAll(data, mount[1]+"/", dir+"/")
	cfg, _, err := floodgateConfig(data)
	if err != nil {
		t.Fatalf("%s's listen.tls block in configmap.yaml: %v", securityDoc, err)
	}
	if tl := cfg.Listen.TLS; tl == nil || tl.ClientCAFile == "" || !slices.Equal(tl.AllowedSANs, []string{identity[1]}) {
		t.Errorf("%s: listen.tls %+v should require a client certificate naming %s, the identity the doc issues Envoy's", securityDoc, tl, identity[1])
	}
	if p := all[*gwapiv1.BackendTLSPolicy](b); len(p) != 1 || string(p[0].Spec.Validation.Hostname) != serverName[1] {
		t.Errorf("%s: Floodgate's certificate names %s, which is not the BackendTLSPolicy's hostname", securityDoc, serverName[1])
	}
	if strings.Contains(text, "mountPath: /etc/floodgate-secret") || mount[1] == "/etc/floodgate" {
		t.Errorf("%s: the TLS Secret's mount path %s collides with another mount", securityDoc, mount[1])
	}
}
