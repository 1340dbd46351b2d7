# Floodgate — see README.md. Every target works on a clean Debian machine with Go.

GO        ?= go
BIN       ?= bin/floodgate
PKGS      ?= ./...
TESTFLAGS ?= -count=1 -timeout 12m

FUZZTIME  ?= 30s
FUZZ      ?= ./extauthz:FuzzClientIP ./extauthz:FuzzHeaderMap ./extauthz:FuzzNormalizePath ./internal/door/check:FuzzCheck ./internal/door/check:FuzzDecoder ./internal/door/ratelimit:FuzzRateLimitDecoder ./internal/door:FuzzParse ./extauthz:FuzzHTTPDoor

.PHONY: all build image run run-redis try-nginx try-haproxy try-caddy test e2e chaos lint bench bench-hop bench-instructions bench-global bench-rlqs bench-ghz bench-tools bench-go bench-profile bench-replay fuzz redis proxies valgrind traefik-harness clean

all: lint test

# What `floodgate version` prints (cmd/floodgate/version.go): the nearest tag or the short commit,
# and the full commit, "-dirty" when the work tree has changes.
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell r=$$(git rev-parse HEAD 2>/dev/null) && { git diff --quiet HEAD 2>/dev/null && echo $$r || echo $$r-dirty; })
LDFLAGS  := -X main.version=$(VERSION) -X main.revision=$(REVISION)

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/floodgate

## image: bin/floodgate-image.tar, the container image, without a container engine or registry
## (cmd/floodgate-image, go-containerregistry): the static binary at /floodgate (and /bin/ratelimit,
## envoyproxy/ratelimit's command, linking to it: docs/ratelimit.md) on an empty base,
## user 65532:65532, reproducible. `docker load -i bin/floodgate-image.tar`; GOARCH=arm64 make image
## for arm64. IMAGE is the reference the manifests name (manifests/deployment.yaml).
IMAGE_REPO ?= ghcr.io/floodgate/floodgate
IMAGE_TAG  ?= 0.1.0
IMAGE      ?= $(IMAGE_REPO):$(IMAGE_TAG)
IMAGE_ARCH := $(or $(GOARCH),$(shell $(GO) env GOARCH))
image:
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" \
	  -o bin/floodgate-linux-$(IMAGE_ARCH) ./cmd/floodgate
	GOOS= GOARCH= $(GO) run ./cmd/floodgate-image --binary bin/floodgate-linux-$(IMAGE_ARCH) --arch $(IMAGE_ARCH) \
	  --version $(VERSION) --revision "$(REVISION)" --tag $(IMAGE) --out bin/floodgate-image.tar

## run: Floodgate on its embedded default (in-memory store, sample policy, loopback), stamped
## with the version make build stamps.
run:
	$(GO) run -ldflags "$(LDFLAGS)" ./cmd/floodgate serve

## try-nginx, try-haproxy, try-caddy: that proxy in front of Floodgate's HTTP door, from zero: Floodgate on
## the sample policy (in-memory), a demo application, and the recipe as shipped (e2e/PROXY/), on
## 127.0.0.1:8080, until Ctrl-C (e2e/try.sh). The proxy must be installed (make proxies, as root).
try-nginx try-haproxy try-caddy:
	bash e2e/try.sh $(@:try-%=%)

## run-redis: Floodgate on a local Redis (internal/config/local-redis.yaml: the sample policy, buckets
## in Redis). Uses the Redis answering on 127.0.0.1:6379, or starts redis-server there (no persistence,
## maxmemory-policy noeviction) and stops it when Floodgate stops.
LOCAL_REDIS_CONFIG ?= internal/config/local-redis.yaml
run-redis: redis
	@if redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then \
	  echo "using the Redis answering on 127.0.0.1:6379"; \
	  exec $(GO) run -ldflags "$(LDFLAGS)" ./cmd/floodgate serve --config $(LOCAL_REDIS_CONFIG); \
	fi; \
	dir=$$(mktemp -d); \
	redis-server --bind 127.0.0.1 --port 6379 --save '' --appendonly no --dir "$$dir" \
	  --maxmemory-policy noeviction --daemonize no --loglevel warning & rpid=$$!; \
	trap 'kill $$rpid 2>/dev/null; wait $$rpid 2>/dev/null; rm -rf "$$dir"' EXIT INT TERM; \
	for i in $$(seq 50); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.1; done; \
	echo "started redis-server on 127.0.0.1:6379 (stopped with Floodgate)"; \
	$(GO) run -ldflags "$(LDFLAGS)" ./cmd/floodgate serve --config $(LOCAL_REDIS_CONFIG)

## test: the whole suite, real redis-server, nginx, HAProxy and Caddy included, and valgrind for the instruction
## counter's test (installed when missing and possible).
test: redis proxies valgrind
	$(GO) test $(TESTFLAGS) $(PKGS)

## e2e: the end-to-end tests alone (also part of test): the built binary as two replicas on one
## real redis-server, driven over gRPC with Envoy-shaped requests; the nginx and HAProxy recipes
## (e2e/nginx, e2e/haproxy) in a real nginx and HAProxy; plus the checks of the container
## run (e2e/docker-compose.yaml, e2e/run.sh, cmd/floodgate/Dockerfile). No container engine needed.
e2e: redis proxies
	$(GO) test -count=1 ./e2e/...

## chaos: the long network-fault cases (e2e/chaos_test.go, build tag chaos) beside the short ones
## make test runs: the built binary on Redis behind a fault-injecting proxy (limiter/redistest/netfault) at
## the production store timeout, under a bandwidth limit with each pipelining setting, and on a
## Redis Cluster with replicas that fails over and moves slots under load, on both doors. Each
## case logs a summary table (docs/failure-modes.md, "Faults a network brings"). A few minutes.
chaos: redis
	$(GO) test -tags chaos -count=1 -timeout 20m -v -run 'TestRedis(Latency|BlackholeAndHalfOpen|ResetsMidBatch|Bandwidth|Cluster)' ./e2e/

## lint: gofmt, go vet and staticcheck (honnef.co/go/tools, pinned, fetched through the Go module
## proxy by go run; the chaos tests included). An exception to a check is made where it applies,
## with //lint:ignore and the reason.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) vet -tags chaos ./e2e/
	GOFLAGS= $(GO) run $(STATICCHECK) -tags chaos $(PKGS)

## bench: the end-to-end table. Builds floodgate and floodbench, starts its own redis-server, a no-op
## ext_authz and rate limit server (the ceiling) and floodgate on 127.0.0.1 (Check, and (b-rls) its rate
## limit service on envoyproxy/ratelimit's requests and YAML), and prints decisions/s, p50, p99, the ratio
## to the no-op server and Redis CPU per decision for every scenario at concurrency 1, 16 and 64 (a few
## minutes), then two reference rows the load generator drives itself on the same redis-server over go-redis:
## (rt) one script round trip, and each scenario's added latency over (a) in multiples of it; (naive) one
## GET + SET script call per decision, and Redis CPU per decision of (b) and (c) against it. BENCHFLAGS go to `floodbench run` (e.g. BENCHFLAGS="--cell 6s --conc 64").
BENCHFLAGS ?=
bench: build redis
	$(GO) build -o bin/floodbench ./cmd/floodbench
	bin/floodbench run --floodgate $(BIN) $(BENCHFLAGS)

## bench-hop: the table with Redis a network hop away: behind floodbench's delaying proxy on 127.0.0.1
## adding HOP_RTTS to every round trip (one run each), for (b), (c) and (b-rls) at concurrency 1 and 16,
## closed-loop and open-loop at 500 and 2000 requests a second, the added latency against (rt) measured
## through the same proxy. BENCHFLAGS go to each `floodbench run`.
HOP_RTTS ?= 500us 1ms
bench-hop: build redis
	$(GO) build -o bin/floodbench ./cmd/floodbench
	@for rtt in $(HOP_RTTS); do echo "== Redis behind a proxy adding $$rtt"; \
	  bin/floodbench run --floodgate $(BIN) --redis-rtt $$rtt $(BENCHFLAGS) || exit 1; done

## bench-instructions: instructions per decision, which do not move with the machine's load as CPU time does:
## floodgate's (b) Redis, (c-lease) one hot key leased, (e) in-memory and (b-rls) rate limit service, and the no-op server's ((a), (a')),
## each server (and Redis) run under valgrind's callgrind and sent the same fixed sequence of requests, one
## at a time, counted between callgrind_control --zero and --dump (a few minutes; needs valgrind).
## INSTRFLAGS go to `floodbench instructions` (e.g. INSTRFLAGS="--requests 5000 --conc 1,16 --out bin/callgrind").
INSTRFLAGS ?=
bench-instructions: build redis
	@command -v valgrind >/dev/null 2>&1 || { echo "bench-instructions needs valgrind (callgrind): apt-get install valgrind" >&2; exit 1; }
	$(GO) build -o bin/floodbench ./cmd/floodbench
	bin/floodbench instructions --floodgate $(BIN) $(INSTRFLAGS)

## bench-global: one global limit (capacity 1,000, 5,000/s) shared by three replicas on one redis-server,
## offered twice its rate for 30 s, without leases and with them: admitted against what the bucket allowed
## at every second and in all, Redis CPU and script calls per decision; first with three floodgate serve
## processes (the limit a policy, decided over gRPC Check), then with three in-process replicas (the
## stores alone). GLOBALFLAGS go to each `floodbench global` (e.g. GLOBALFLAGS="--offered 0.8" for demand
## below the limit, where leases pay).
GLOBALFLAGS ?=
bench-global: build redis
	$(GO) build -o bin/floodbench ./cmd/floodbench
	bin/floodbench global --floodgate $(BIN) $(GLOBALFLAGS)
	bin/floodbench global $(GLOBALFLAGS)

## bench-rlqs: Envoy's rate limit quota service: eight simulated Envoys on two floodgate replicas on one
## redis-server, one bucket of 1,000 a second, demand twice that (one Envoy half of it, changing every
## 10 s), 60 s: the fleet's admitted total against the limit, each Envoy's share against its demand, CPU
## per million requests admitted. RLQSFLAGS go to `floodbench rlqs`.
RLQSFLAGS ?=
bench-rlqs: build redis
	$(GO) build -o bin/floodbench ./cmd/floodbench
	bin/floodbench rlqs --floodgate $(BIN) $(RLQSFLAGS)

## bench-ghz: the table again with ghz, the load generator of the reference figures (docs/performance.md), instead of the
## in-process client, at concurrency 50: (a), (b), (e), (f), and (r) envoyproxy/ratelimit on the same
## redis-server with the same callers. Needs bench-tools.
bench-ghz: build redis bench-tools
	$(GO) build -o bin/floodbench ./cmd/floodbench
	bin/floodbench run --floodgate $(BIN) --ghz $(GHZ) --ratelimit $(RATELIMIT) --scenarios a,b,e,f,r --conc 50 --cell 6s $(BENCHFLAGS)

## bench-tools: ghz and envoyproxy/ratelimit (service_cmd) in bin/, each built with go install at a pinned
## version (needs the Go module proxy) unless GHZ / RATELIMIT name binaries you have. With them, make bench
## can add (r) too: make bench BENCHFLAGS="--ratelimit bin/ratelimit --scenarios a,b,a',r,b-rls".
GHZ       ?= bin/ghz
RATELIMIT ?= bin/ratelimit
bench-tools:
	@test -x $(GHZ) || { echo "installing ghz into bin/"; GOBIN=$(CURDIR)/bin $(GO) install github.com/bojand/ghz/cmd/ghz@v0.120.0; }
	@test -x $(RATELIMIT) || { echo "installing envoyproxy/ratelimit into bin/"; \
	  GOBIN=$(CURDIR)/bin $(GO) install github.com/envoyproxy/ratelimit/src/service_cmd@v1.4.1-0.20260122083618-3fb702589d36 && \
	  mv bin/service_cmd $(RATELIMIT); }

## bench-go: Go benchmarks with allocs/op: the Check handler (in-process and over loopback gRPC) and
## the engine (in-memory and Redis stores, with the raw EVALSHA baseline).
bench-go: redis
	$(GO) test -run '^$$' -bench . -benchmem ./extauthz/... ./internal/door/check/ ./internal/door/ratelimit/ ./limiter/...

## bench-profile: CPU and allocation profiles of floodgate under (b) Redis and (e) in-memory load at
## concurrency 64, written to bin/profiles (read them with go tool pprof).
bench-profile: build redis
	$(GO) build -o bin/floodbench ./cmd/floodbench
	bin/floodbench run --floodgate $(BIN) --scenarios a,b,e --conc 64 --cell 5s --rounds 1 --profile bin/profiles $(BENCHFLAGS)

## bench-replay: floodgate replay on a generated Envoy access log of 1,000,000 lines from 100,000 callers
## (about 300 MB in a temporary directory): prints lines/s and the process's peak RSS. The log's size is
## REPLAY_LINES lines from REPLAY_CALLERS callers.
REPLAY_LINES   ?= 1000000
REPLAY_CALLERS ?= 100000
REPLAY_MAX_CALLERS ?= 0
bench-replay:
	$(GO) test -run '^$$' -bench '^BenchmarkReplayBinary$$' -benchtime 1x -timeout 30m ./internal/replay/ \
	  -replay.lines $(REPLAY_LINES) -replay.callers $(REPLAY_CALLERS) -replay.max-callers $(REPLAY_MAX_CALLERS)

## fuzz: each fuzz target for FUZZTIME (make test replays their committed corpora in testdata/fuzz).
fuzz:
	@for t in $(FUZZ); do pkg=$${t%%:*}; fn=$${t##*:}; \
	  echo "fuzzing $$fn in $$pkg for $(FUZZTIME)"; \
	  $(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; done

## redis: make sure redis-server (>= 7.0) and redis-cli are on PATH, and libfaketime and cc (the quota tests fake
## redis-server's clock); install them with apt-get when root.
redis:
	@if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "redis-server not found: installing it with apt-get"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools >/dev/null 2>&1 || \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools >/dev/null; } || \
	    { echo "apt-get could not install redis-server; install Redis >= 7.0 (redis-server, redis-cli) and re-run" >&2; exit 1; }; \
	  else \
	    echo "the tests need redis-server and redis-cli (Redis >= 7.0) on PATH: run 'sudo apt-get install redis-server' (Debian/Ubuntu) and re-run" >&2; exit 1; \
	  fi; \
	fi
	@v=$$(redis-server --version | sed -n 's/.*v=\([0-9]*\)\..*/\1/p'); \
	if [ -n "$$v" ] && [ "$$v" -lt 7 ]; then \
	  echo "redis-server $$(redis-server --version | sed -n 's/.*v=\([0-9.]*\).*/\1/p') is too old: Floodgate needs Redis >= 7.0 (PEXPIRETIME)" >&2; exit 1; fi
	@if ! ls /usr/lib/*/faketime/libfaketimeMT.so.1 >/dev/null 2>&1 || ! command -v cc >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "libfaketime or cc not found (the quota tests fake redis-server's clock): installing faketime and gcc with apt-get"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq faketime gcc >/dev/null 2>&1 || \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq faketime gcc >/dev/null; } || \
	    { echo "apt-get could not install faketime and gcc; install them and re-run" >&2; exit 1; }; \
	  else \
	    echo "the quota tests need libfaketime and a C compiler: run 'sudo apt-get install faketime gcc' (Debian/Ubuntu) and re-run" >&2; exit 1; \
	  fi; \
	fi

## proxies: make sure nginx (with ngx_http_auth_request_module), haproxy (with Lua) and caddy (>= 2.5,
## with copy_response_headers), which the recipes' tests run, are installed; install Debian's packages
## with apt-get when root.
proxies:
	@if { ! command -v nginx >/dev/null 2>&1 && ! test -x /usr/sbin/nginx; } || \
	    { ! command -v haproxy >/dev/null 2>&1 && ! test -x /usr/sbin/haproxy; } || \
	    ! command -v caddy >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "nginx, haproxy or caddy not found: installing them with apt-get"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx haproxy caddy >/dev/null 2>&1 || \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx haproxy caddy >/dev/null; } || \
	    { echo "apt-get could not install nginx, haproxy and caddy; install them (nginx with ngx_http_auth_request_module, haproxy >= 2.2 with Lua, caddy >= 2.5) and re-run" >&2; exit 1; }; \
	  else \
	    echo "the tests need nginx, haproxy and caddy: run 'sudo apt-get install nginx haproxy caddy' (Debian/Ubuntu) and re-run" >&2; exit 1; \
	  fi; \
	fi
	@n=$$(command -v nginx || echo /usr/sbin/nginx); $$n -V 2>&1 | grep -q http_auth_request_module || \
	  { echo "$$n has no ngx_http_auth_request_module: install Debian's nginx package, which is built with it" >&2; exit 1; }
	@h=$$(command -v haproxy || echo /usr/sbin/haproxy); $$h -vv 2>&1 | grep -q 'Built with Lua' || \
	  { echo "$$h is built without Lua: install Debian's haproxy package, which has it" >&2; exit 1; }
	@caddy list-modules 2>/dev/null | grep -q http.handlers.copy_response_headers || \
	  { echo "$$(command -v caddy) has no copy_response_headers (Caddy < 2.5): install Debian's caddy package (2.6.2)" >&2; exit 1; }

## traefik-harness: bin/traefik-harness, which the Traefik recipe's tests (e2e/traefik) run: Traefik's own
## entry point, routers, middlewares and reverse proxy, built from its packages at the version
## e2e/traefik/harness/go.mod pins, in a module of its own (the main module's go.mod does not carry
## Traefik's dependencies). Minutes the first time on a fresh machine, seconds from Go's build cache;
## vetted as it is built. The tests fail under CI without it and skip elsewhere.
traefik-harness:
	cd e2e/traefik/harness && $(GO) build -o $(CURDIR)/bin/traefik-harness . && $(GO) vet .

## valgrind: make sure valgrind (callgrind), which the instruction counter's test runs, is installed;
## install Debian's package with apt-get when root.
valgrind:
	@if ! command -v valgrind >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "valgrind not found: installing it with apt-get"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null 2>&1 || \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null; } || \
	    { echo "apt-get could not install valgrind; install it and re-run" >&2; exit 1; }; \
	  else \
	    echo "the tests need valgrind (floodbench instructions runs under callgrind): run 'sudo apt-get install valgrind' (Debian/Ubuntu) and re-run" >&2; exit 1; \
	  fi; \
	fi

clean:
	rm -rf bin
