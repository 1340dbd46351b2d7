package envoy

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The retry policy of a Check must never cut it short.
//
// What Envoy does with GrpcService.retry_policy (read in Envoy's source, for the v1.37 the compose file
// pins and the versions around it):
//   - Grpc::AsyncClientImpl's constructor (source/common/grpc/async_client_impl.cc) turns it into a route
//     retry policy with Http::Utility::convertCoreToRouteRetryPolicy(config.retry_policy(), ""), and every
//     stream without a retry policy of its own (ext_authz's GrpcClientImpl::check sets only the timeout) gets it.
//   - convertCoreToRouteRetryPolicy (source/common/http/utility.cc) takes the policy's own retry_on when the
//     caller passes "" (as the gRPC client does), and sets the route policy's per_try_timeout to
//     retry_back_off.max_interval: 10 × base_interval when max_interval is unset, base_interval 1s when
//     retry_back_off is unset (its test: TestConvertCoreToRouteRetryPolicy, test/common/http/utility_test.cc).
//   - The router drops a per-try timeout that is not below the request's timeout
//     (FilterUtility::finalTimeout, source/common/router/router.cc); the request's timeout here is the
//     filter's grpc_service.timeout.
//
// So a max_interval below the Check's timeout ends every slower Check at max_interval: an Error, which with
// failure_mode_allow lets the request through unlimited, without the degraded marker Floodgate's own
// failure mode adds. The rule holds for ext_authz's http_service.retry_policy too (Envoy >= 1.37).

// defaultCheckTimeout is ext_authz's timeout when grpc_service.timeout is unset (its proto comment: 200ms).
const defaultCheckTimeout = 200 * time.Millisecond

// perTryTimeout is the per-try timeout Envoy derives from rp (convertCoreToRouteRetryPolicy); ok is false
// when there is no retry policy, hence no per-try timeout.
func perTryTimeout(rp *corev3.RetryPolicy) (d time.Duration, ok bool) {
	if rp == nil {
		return 0, false
	}
	base, max := time.Second, 10*time.Second
	if bo := rp.GetRetryBackOff(); bo != nil {
		base = bo.GetBaseInterval().AsDuration()
		max = 10 * base
		if bo.GetMaxInterval() != nil {
			max = bo.GetMaxInterval().AsDuration()
		}
	}
	return max, true
}

// cutChecks lists every ext_authz filter of the bootstrap src whose retry policy cuts a Check before its
// timeout; n counts the ext_authz filters read.
func cutChecks(src []byte) (problems []string, n int, err error) {
	bs, _, err := loadBootstrap(src)
	if err != nil {
		return nil, 0, err
	}
	for _, l := range bs.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				if f.GetName() != hcmFilter {
					continue
				}
				hcm, err := unpack(f.GetTypedConfig(), &hcmv3.HttpConnectionManager{})
				if err != nil {
					return nil, 0, err
				}
				for _, hf := range hcm.GetHttpFilters() {
					if hf.GetTypedConfig().GetTypeUrl() != "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz" {
						continue
					}
					x, err := unpack(hf.GetTypedConfig(), &extauthzv3.ExtAuthz{})
					if err != nil {
						return nil, 0, err
					}
					n++
					at := fmt.Sprintf("listener %s, filter %s", l.GetName(), hf.GetName())
					var timeout time.Duration
					var rp *corev3.RetryPolicy
					switch {
					case x.GetGrpcService() != nil:
						timeout, rp = defaultCheckTimeout, x.GetGrpcService().GetRetryPolicy()
						if t := x.GetGrpcService().GetTimeout(); t != nil {
							timeout = t.AsDuration()
						}
					case x.GetHttpService() != nil:
						timeout, rp = x.GetHttpService().GetServerUri().GetTimeout().AsDuration(), x.GetHttpService().GetRetryPolicy()
					}
					if per, ok := perTryTimeout(rp); ok && per < timeout {
						problems = append(problems, fmt.Sprintf("%s: the retry policy's max_interval (%v) is Envoy's per-try timeout and is below the Check's timeout (%v): every Check slower than %v fails and, with failure_mode_allow, passes unlimited; set max_interval >= timeout", at, per, timeout, per))
					}
				}
			}
		}
	}
	return problems, n, nil
}

// TestNoShippedCheckIsCutByItsRetryPolicy reads every Envoy configuration the repository ships (any YAML
// file under envoy/, e2e/ and manifests/ that configures Envoy's ext_authz filter) and fails on a retry
// policy whose per-try timeout is below the Check's timeout.
func TestNoShippedCheckIsCutByItsRetryPolicy(t *testing.T) {
	filters := 0
	for _, root := range []string{".", "../e2e", "../manifests"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !(strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
				return err
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if !bytes.Contains(src, []byte("envoy.extensions.filters.http.ext_authz.v3.ExtAuthz")) {
				return nil
			}
			p, n, err := cutChecks(src)
			if err != nil {
				t.Errorf("%s configures ext_authz but does not load as an Envoy bootstrap (teach this test to read it): %v", path, err)
				return nil
			}
			filters += n
			for _, s := range p {
				t.Errorf("%s: %s", path, s)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if filters < len(examples) {
		t.Fatalf("read %d ext_authz filters, want at least one in each of the %d examples", filters, len(examples))
	}
}

// TestPerTryTimeoutIsEnvoys: the rule the check applies, on the cases of Envoy's own
// TestConvertCoreToRouteRetryPolicy, and a broken copy of the shipped config is caught.
func TestPerTryTimeoutIsEnvoys(t *testing.T) {
	bo := func(base, max time.Duration) *corev3.RetryPolicy {
		rp := &corev3.RetryPolicy{RetryBackOff: &corev3.BackoffStrategy{}}
		rp.RetryBackOff.BaseInterval = durationpb.New(base)
		if max > 0 {
			rp.RetryBackOff.MaxInterval = durationpb.New(max)
		}
		return rp
	}
	for _, tc := range []struct {
		rp   *corev3.RetryPolicy
		want time.Duration
	}{
		{&corev3.RetryPolicy{}, 10 * time.Second}, // no retry_back_off: base 1s, max 10 × base
		{bo(5*time.Millisecond, 0), 50 * time.Millisecond},
		{bo(5*time.Millisecond, 25*time.Millisecond), 25 * time.Millisecond},
	} {
		if got, ok := perTryTimeout(tc.rp); !ok || got != tc.want {
			t.Errorf("perTryTimeout(%v) = %v, want %v", tc.rp, got, tc.want)
		}
	}
	if _, ok := perTryTimeout(nil); ok {
		t.Error("no retry policy gave a per-try timeout")
	}
	src, err := os.ReadFile("envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string][2]string{
		"max_interval below the timeout": {"max_interval: 0.25s", "max_interval: 0.025s"},
		"max_interval left to default":   {"retry_back_off: { base_interval: 0.005s, max_interval: 0.25s }", "retry_back_off: { base_interval: 0.005s }"},
	} {
		p, _, err := cutChecks(mutate(t, src, tc[0], tc[1]))
		if err != nil || len(p) != 1 || !strings.Contains(p[0], "per-try timeout") {
			t.Errorf("%s: got %v, %v; want the cut reported", name, p, err)
		}
	}
}
