package envoy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/doors"
	"github.com/floodgate/floodgate/internal/floodgatetest"
	"github.com/floodgate/floodgate/limiter/redistest"
	"github.com/floodgate/floodgate/limiter/redistest/testca"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// The mutual TLS example: envoy/envoy.yaml and envoy/floodgate.yaml, with Envoy presenting a client
// certificate to Floodgate and Floodgate answering only the certificates it lists.
var mtlsExample = example{name: "mtls", envoy: "mtls/envoy.yaml", floodgate: "mtls/floodgate.yaml", service: "floodgate", notInCompose: true}

const (
	tlsSocket = "envoy.transport_sockets.tls"
	// Where the example reads its certificates; the tests put generated ones elsewhere.
	envoyTLSDir     = "/etc/envoy/floodgate-tls/"
	floodgateTLSDir = "/etc/floodgate/tls/"
)

func TestMain(m *testing.M) { os.Exit(floodgatetest.Main(m)) }

// upstreamTLS returns the UpstreamTlsContext of the cluster ext_authz sends Checks to.
func upstreamTLS(ec *envoyConfig) (*tlsv3.UpstreamTlsContext, error) {
	c := ec.clusters[ec.extAuthz.GetGrpcService().GetEnvoyGrpc().GetClusterName()]
	ts := c.GetTransportSocket()
	if ts == nil || ts.GetName() != tlsSocket {
		return nil, fmt.Errorf("cluster %s has no %s transport_socket: Checks travel in plaintext", c.GetName(), tlsSocket)
	}
	return unpack(ts.GetTypedConfig(), &tlsv3.UpstreamTlsContext{})
}

// mtlsProblems lists what keeps the pair from mutual TLS: Envoy must present a certificate, verify
// Floodgate's against a CA and a SAN, and offer ALPN h2; Floodgate must require a client
// certificate from a CA and name the identities it answers.
func mtlsProblems(ec *envoyConfig, cfg *door.Config) []string {
	var p []string
	bad := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	up, err := upstreamTLS(ec)
	if err != nil {
		return []string{err.Error()}
	}
	ctc := up.GetCommonTlsContext()
	if up.GetSni() == "" {
		bad("UpstreamTlsContext.sni is empty: Floodgate's certificate is checked against no name")
	}
	// grpc-go, which Floodgate serves with, refuses a TLS connection without ALPN
	// (credentials/tls.go, ServerHandshake: "missing selected ALPN property").
	if !slices.Contains(ctc.GetAlpnProtocols(), "h2") {
		bad("common_tls_context.alpn_protocols must offer h2: Floodgate's gRPC server refuses a TLS connection without ALPN")
	}
	certs := ctc.GetTlsCertificates()
	if len(certs) != 1 || certs[0].GetCertificateChain().GetFilename() == "" || certs[0].GetPrivateKey().GetFilename() == "" {
		bad("common_tls_context.tls_certificates: want Envoy's one client certificate and key, as files")
	}
	vc := ctc.GetValidationContext()
	if vc.GetTrustedCa().GetFilename() == "" {
		bad("validation_context.trusted_ca: Envoy would accept any server certificate")
	}
	if len(vc.GetMatchTypedSubjectAltNames()) == 0 {
		bad("validation_context.match_typed_subject_alt_names: any certificate of the CA would pass for Floodgate")
	}
	t := cfg.Listen.TLS
	switch {
	case t == nil:
		bad("Floodgate's listen.tls is not set: it serves plaintext")
	case t.ClientCAFile == "":
		bad("Floodgate's listen.tls.client_ca_file is not set: it answers any client")
	case len(t.AllowedSANs) == 0:
		bad("Floodgate's listen.tls.allowed_sans is empty: any certificate of the CA may send Checks")
	}
	return p
}

// issue writes certFile and keyFile: a server certificate for dnsNames (and 127.0.0.1), or a
// client certificate carrying uris.
func issue(t *testing.T, ca *testca.CA, certFile, keyFile string, server bool, dnsNames []string, uris ...string) {
	t.Helper()
	l := testca.Leaf{Name: filepath.Base(certFile), CertFile: certFile, KeyFile: keyFile, URIs: uris,
		Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		l.Usage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		l.DNS, l.IPs = dnsNames, []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	ca.Issue(t, l)
}

// mtlsFiles generates what the example mounts, under dir: Floodgate's certificate (naming the SANs
// Envoy checks), the CA both trust, and Envoy's client certificate (naming Floodgate's first
// allowed SAN). The example's paths map to dir/floodgate/ and dir/envoy/.
func mtlsFiles(t *testing.T, dir string, up *tlsv3.UpstreamTlsContext, allowed string) *testca.CA {
	t.Helper()
	ca := testca.New(t, "floodgate mtls test CA", filepath.Join(dir, "floodgate", "ca.crt"))
	caPEM, err := os.ReadFile(filepath.Join(dir, "floodgate", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range up.GetCommonTlsContext().GetValidationContext().GetMatchTypedSubjectAltNames() {
		names = append(names, m.GetMatcher().GetExact())
	}
	issue(t, ca, filepath.Join(dir, "floodgate", "server.crt"), filepath.Join(dir, "floodgate", "server.key"), true, names)
	ctc := up.GetCommonTlsContext()
	issue(t, ca, localPath(dir, ctc.GetTlsCertificates()[0].GetCertificateChain().GetFilename()),
		localPath(dir, ctc.GetTlsCertificates()[0].GetPrivateKey().GetFilename()), false, nil, allowed)
	if err := os.WriteFile(localPath(dir, ctc.GetValidationContext().GetTrustedCa().GetFilename()), caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return ca
}

// localPath maps a path of the example to the test's files under dir.
func localPath(dir, p string) string {
	p = strings.ReplaceAll(p, envoyTLSDir, filepath.Join(dir, "envoy")+"/")
	return strings.ReplaceAll(p, floodgateTLSDir, filepath.Join(dir, "floodgate")+"/")
}

// envoyClientTLS is the TLS client Envoy's UpstreamTlsContext describes, on the test's files: its
// certificate, the CA it trusts, its SNI and ALPN, and the SAN match it requires of the server
// (match_typed_subject_alt_names, exact DNS names).
func envoyClientTLS(t *testing.T, dir string, up *tlsv3.UpstreamTlsContext) *tls.Config {
	t.Helper()
	ctc := up.GetCommonTlsContext()
	caPEM, err := os.ReadFile(localPath(dir, ctc.GetValidationContext().GetTrustedCa().GetFilename()))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	c := ctc.GetTlsCertificates()[0]
	cert, err := tls.LoadX509KeyPair(localPath(dir, c.GetCertificateChain().GetFilename()), localPath(dir, c.GetPrivateKey().GetFilename()))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range ctc.GetValidationContext().GetMatchTypedSubjectAltNames() {
		names = append(names, m.GetMatcher().GetExact())
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: up.GetSni(), NextProtos: ctc.GetAlpnProtocols(),
		Certificates: []tls.Certificate{cert},
		VerifyConnection: func(cs tls.ConnectionState) error {
			for _, n := range cs.PeerCertificates[0].DNSNames {
				if slices.Contains(names, n) {
					return nil
				}
			}
			return errors.New("Floodgate's certificate names none of match_typed_subject_alt_names")
		},
	}
}

// readMTLSExample loads the example's Envoy bootstrap and its Floodgate configuration, with the
// certificate paths pointing at files generated under dir.
func readMTLSExample(t *testing.T, dir string) (*bootstrapv3.Bootstrap, *envoyConfig, *tlsv3.UpstreamTlsContext, string, *testca.CA) {
	t.Helper()
	data, err := os.ReadFile(mtlsExample.envoy)
	if err != nil {
		t.Fatal(err)
	}
	bs, _, err := loadBootstrap(data)
	if err != nil {
		t.Fatalf("%s: %v", mtlsExample.envoy, err)
	}
	ec, err := inspect(bs)
	if err != nil {
		t.Fatal(err)
	}
	up, err := upstreamTLS(ec)
	if err != nil || len(up.GetCommonTlsContext().GetTlsCertificates()) == 0 {
		t.Fatalf("%s: %v", mtlsExample.envoy, err)
	}
	src, err := os.ReadFile(mtlsExample.floodgate)
	if err != nil {
		t.Fatal(err)
	}
	var allowed struct {
		Listen struct {
			TLS struct {
				AllowedSANs []string `json:"allowed_sans"`
			} `json:"tls"`
		} `json:"listen"`
	}
	if err := yaml.Unmarshal(src, &allowed); err != nil || len(allowed.Listen.TLS.AllowedSANs) == 0 {
		t.Fatalf("%s: no listen.tls.allowed_sans (%v)", mtlsExample.floodgate, err)
	}
	ca := mtlsFiles(t, dir, up, allowed.Listen.TLS.AllowedSANs[0])
	return bs, ec, up, localPath(dir, string(src)), ca
}

// TestMTLSExampleIsTheEdgeWithMutualTLS: the example is envoy/envoy.yaml and envoy/floodgate.yaml
// but for the TLS settings, passes every check the other examples pass, and sets mutual TLS up on
// both sides.
func TestMTLSExampleIsTheEdgeWithMutualTLS(t *testing.T) {
	dir := t.TempDir()
	bs, ec, _, fgSrc, _ := readMTLSExample(t, dir)
	cfg, err := doors.Parse(mtlsExample.floodgate, []byte(fgSrc))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range consistency(ec, cfg, mtlsExample.service) {
		t.Errorf("%s vs %s: %s", mtlsExample.envoy, mtlsExample.floodgate, p)
	}
	for _, p := range mtlsProblems(ec, cfg) {
		t.Errorf("%s vs %s: %s", mtlsExample.envoy, mtlsExample.floodgate, p)
	}

	// The rest is the edge example's, so a fix there must be made here too.
	edgeData, err := os.ReadFile("envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	edge, _, err := loadBootstrap(edgeData)
	if err != nil {
		t.Fatal(err)
	}
	plain := proto.Clone(bs).(*bootstrapv3.Bootstrap)
	for _, c := range plain.GetStaticResources().GetClusters() {
		c.TransportSocket = nil
	}
	if !proto.Equal(plain, edge) {
		t.Errorf("%s differs from envoy.yaml in more than the floodgate cluster's transport_socket: make the same change in both", mtlsExample.envoy)
	}
	var a, b map[string]any
	edgeFG, err := os.ReadFile("floodgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(edgeFG, &a); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(fgSrc), &b); err != nil {
		t.Fatal(err)
	}
	delete(b["listen"].(map[string]any), "tls")
	if !reflect.DeepEqual(a, b) {
		t.Errorf("%s differs from floodgate.yaml in more than listen.tls: make the same change in both", mtlsExample.floodgate)
	}

	// The checks can fail.
	envoySrc, err := os.ReadFile(mtlsExample.envoy)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, old, new, want string }{
		{"no ALPN", "            alpn_protocols: [h2]\n", "", "alpn_protocols must offer h2"},
		{"no client certificate", "            tls_certificates:\n              - certificate_chain: { filename: /etc/envoy/floodgate-tls/client.crt }\n                private_key: { filename: /etc/envoy/floodgate-tls/client.key }\n", "", "tls_certificates"},
		{"no SAN check", "              match_typed_subject_alt_names:\n                - san_type: DNS\n                  matcher: { exact: floodgate }\n", "", "match_typed_subject_alt_names"},
		{"plaintext", "      transport_socket:\n", "      transport_socket_x:\n", "transport_socket_x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := mutate(t, envoySrc, tc.old, tc.new)
			bs, _, err := loadBootstrap(src)
			var got []string
			if err != nil {
				got = []string{err.Error()}
			} else if ec, err := inspect(bs); err != nil {
				got = []string{err.Error()}
			} else {
				got = mtlsProblems(ec, cfg)
			}
			if !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, tc.want) }) {
				t.Fatalf("not reported: %v (want %q)", got, tc.want)
			}
		})
	}
	for _, tc := range []struct{ name, old, new, want string }{
		{"no allow-list", "    allowed_sans:\n      - spiffe://floodgate.example/envoy/edge    # Envoy's client certificate's URI SAN\n", "", "allowed_sans is empty"},
		{"no client CA", "    client_ca_file: ", "    # client_ca_file: ", "client_ca_file is not set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := mutate(t, []byte(fgSrc), tc.old, tc.new)
			if tc.name == "no client CA" {
				src = mutate(t, src, "    allowed_sans:\n      - spiffe://floodgate.example/envoy/edge    # Envoy's client certificate's URI SAN\n", "")
			}
			cfg, err := doors.Parse(mtlsExample.floodgate, src)
			if err != nil {
				t.Fatal(err)
			}
			if got := mtlsProblems(ec, cfg); !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, tc.want) }) {
				t.Fatalf("not reported: %v (want %q)", got, tc.want)
			}
		})
	}
}

// TestMTLSExampleRefusesStrangersAndDecidesAsBefore runs the real floodgate with
// mtls/floodgate.yaml (its Redis a real redis-server, its certificates generated here) and calls it
// over gRPC: as Envoy's cluster would (its client certificate, SNI, ALPN and SAN check), Checks are
// decided exactly as envoy/floodgate.yaml decides them in plaintext; without a certificate, with a
// certificate of another CA, with a certificate of the CA that names another identity, or in
// plaintext, every Check is refused and spends no token.
func TestMTLSExampleRefusesStrangersAndDecidesAsBefore(t *testing.T) {
	dir := t.TempDir()
	_, _, up, fgSrc, ca := readMTLSExample(t, dir)
	rds := redistest.Start(t)
	for old, new := range map[string]string{
		"grpc: 0.0.0.0:9191":      "grpc: 127.0.0.1:0",
		"admin: 0.0.0.0:9192":     "admin: \"\"",
		"drain_delay: 5s":         "drain_delay: 0s",
		"addresses: [redis:6379]": "addresses: [" + rds.Addr + "]",
	} {
		fgSrc = string(mutate(t, []byte(fgSrc), old, new))
	}
	cfgFile := filepath.Join(dir, "floodgate.yaml")
	if err := os.WriteFile(cfgFile, []byte(fgSrc), 0o600); err != nil {
		t.Fatal(err)
	}
	p := floodgatetest.Start(t, floodgatetest.Floodgate(t, floodgatetest.Build{}), "serve", "--config", cfgFile)

	envoyTLS := envoyClientTLS(t, dir, up)
	leaf, err := x509.ParseCertificate(envoyTLS.Certificates[0].Certificate[0])
	if err != nil || len(leaf.URIs) != 1 {
		t.Fatalf("Envoy's client certificate: %v, URIs %v", err, leaf.URIs)
	}
	// Strangers: Envoy's client otherwise, with another certificate or none. A forger's CA can put
	// Envoy's own identity in a certificate; the example's CA issues one for somebody else.
	other := testca.New(t, "floodgate mtls test CA", filepath.Join(dir, "other", "ca.crt"))
	issue(t, other, filepath.Join(dir, "other", "forged.crt"), filepath.Join(dir, "other", "forged.key"), false, nil, leaf.URIs[0].String())
	issue(t, ca, filepath.Join(dir, "stranger.crt"), filepath.Join(dir, "stranger.key"), false, nil, "spiffe://floodgate.example/somebody/else")
	withCert := func(certFile, keyFile string) credentials.TransportCredentials {
		c := envoyTLS.Clone()
		c.Certificates = nil
		if certFile != "" {
			kp, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				t.Fatal(err)
			}
			c.Certificates = []tls.Certificate{kp}
		}
		return credentials.NewTLS(c)
	}

	check := func(creds credentials.TransportCredentials, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
		conn, err := grpc.NewClient(p.GRPC, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return authv3.NewAuthorizationClient(conn).Check(ctx, req)
	}
	search := func(key string) *authv3.CheckRequest {
		return checkRequest("GET", "/v1/search", map[string]string{"route": "search"}, map[string]string{"x-api-key": key}, nil)
	}

	for name, creds := range map[string]credentials.TransportCredentials{
		"no client certificate":                    withCert("", ""),
		"a certificate of another CA":              withCert(filepath.Join(dir, "other", "forged.crt"), filepath.Join(dir, "other", "forged.key")),
		"a certificate of the CA, not on the list": withCert(filepath.Join(dir, "stranger.crt"), filepath.Join(dir, "stranger.key")),
		"plaintext": insecure.NewCredentials(),
	} {
		for range 3 {
			resp, err := check(creds, search("victim"))
			if err == nil {
				t.Fatalf("%s: Floodgate answered (%v): a stranger can spend the victim's tokens", name, resp.GetStatus())
			}
			if status.Code(err) != codes.Unavailable {
				t.Errorf("%s: %v, want the connection refused (Unavailable)", name, err)
			}
		}
	}

	// Envoy's certificate: the decisions of the plaintext example, Check by Check, and the
	// strangers above spent nothing of the victim's bucket.
	edge, err := doors.Load("floodgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	reference := extauthz.NewServer(edge.Engine, storetest.Memory(nil), extauthz.ServerOptions{})
	creds := credentials.NewTLS(envoyTLS)
	denied := 0
	for i := range 8 {
		req := search("victim")
		got, err := check(creds, req)
		if err != nil {
			t.Fatalf("Check %d with Envoy's certificate: %v", i+1, err)
		}
		want, err := reference.Check(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if got.GetStatus().GetCode() != want.GetStatus().GetCode() || !slices.Equal(policiesOf(got), policiesOf(want)) {
			t.Fatalf("Check %d over mTLS: status %d, policies %v; envoy/floodgate.yaml decides status %d, policies %v",
				i+1, got.GetStatus().GetCode(), policiesOf(got), want.GetStatus().GetCode(), policiesOf(want))
		}
		if got.GetStatus().GetCode() != 0 {
			denied++
		}
	}
	if denied == 0 || denied == 8 {
		t.Fatalf("%d of 8 Checks denied: the search policy (capacity 5) should allow 5, then deny", denied)
	}
}
