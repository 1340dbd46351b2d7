#!/usr/bin/env bash
# End-to-end run of the shipped configuration in containers: Envoy (envoy/envoy.yaml), two Floodgate
# replicas (envoy/floodgate.yaml), Redis and an echo upstream, plus the JWT example (envoy/jwt/) and
# the rate limit service example (envoy/ratelimit/: Envoy's rate limit filter, two Floodgate replicas).
#
#   bash e2e/run.sh          # build, start, check, stop (exit 0 when every check passed)
#   KEEP=1 bash e2e/run.sh   # leave the containers running afterwards
#
# Needs Docker with the compose plugin, and curl. Talks to 127.0.0.1 only. Every wait is bounded.
set -euo pipefail
cd "$(dirname "$0")"

COMPOSE=(docker compose -f docker-compose.yaml --profile jwt --profile rls)
ENVOY=http://127.0.0.1:10000       # envoy/envoy.yaml listener, published by compose
ENVOY_ADMIN=http://127.0.0.1:9901
ENVOY_JWT=http://127.0.0.1:10001   # envoy/jwt/envoy.yaml listener
ENVOY_JWT_ADMIN=http://127.0.0.1:9902
ENVOY_RLS=http://127.0.0.1:10002   # envoy/ratelimit/envoy.yaml listener
ENVOY_RLS_ADMIN=http://127.0.0.1:9903
# The policies this script drives to 429 (e2e/e2e_test.go checks these against the configs).
SEARCH_POLICY=search-per-caller    # envoy/floodgate.yaml, route /v1/search
SEARCH_CAPACITY=5
JWT_POLICY=per-user                # envoy/jwt/floodgate.yaml
JWT_CAPACITY=5
FLOODGATE_REPLICAS=2               # deploy.replicas of the floodgate service
RLS_REPLICAS=2                     # deploy.replicas of the floodgate-rls service
# The rate limit service's per-key limit on /v1/ (envoy/ratelimit/config/edge.yaml) and its burst
# (rls.burst in envoy/ratelimit/floodgate.yaml): RLS_BURST requests pass at once, then 429.
RLS_LIMIT=api-per-key
RLS_BURST=20
WAIT_SECONDS=${WAIT_SECONDS:-180}  # bound on every wait (the first build takes a while)

# The identity hash secret of both Floodgate configurations (identity.hash_secret_env): a fresh one
# per run unless given, the same for every replica (compose passes it to each).
FLOODGATE_HASH_SECRET=${FLOODGATE_HASH_SECRET:-$(head -c 32 /dev/urandom | base64)}
export FLOODGATE_HASH_SECRET

tmp=$(mktemp -d)
failures=0
cleanup() {
  rm -rf "$tmp"
  if [ "${KEEP:-0}" != 1 ]; then
    "${COMPOSE[@]}" down --volumes --remove-orphans >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

pass() { echo "ok   $*"; }
fail() { echo "FAIL $*" >&2; failures=$((failures + 1)); }

# wait_until DESCRIPTION COMMAND...: retry COMMAND once a second until it succeeds or WAIT_SECONDS pass.
wait_until() {
  local what=$1; shift
  local deadline=$((SECONDS + WAIT_SECONDS))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      echo "timed out after ${WAIT_SECONDS}s waiting for $what" >&2
      "${COMPOSE[@]}" ps >&2 || true
      "${COMPOSE[@]}" logs --tail 40 >&2 || true
      exit 1
    fi
    sleep 1
  done
  pass "$what"
}

# healthy_hosts ADMIN N: Envoy's floodgate cluster has N hosts that passed the gRPC health check.
healthy_hosts() {
  local n
  n=$(curl -fsS "$1/clusters" | grep -c '^floodgate::.*::health_flags::healthy$' || true)
  [ "$n" -eq "$2" ]
}

# request NAME URL [curl args...]: one request; leaves $tmp/NAME.code (000: no answer), .headers
# (names lower-cased) and .body.
request() {
  local name=$1 url=$2; shift 2
  : >"$tmp/$name.raw"
  : >"$tmp/$name.body"
  curl -sS --max-time 5 -o "$tmp/$name.body" -D "$tmp/$name.raw" -w '%{http_code}' "$@" "$url" >"$tmp/$name.code" || true
  tr -d '\r' <"$tmp/$name.raw" | awk 'BEGIN { FS = OFS = ": " } { $1 = tolower($1); print }' >"$tmp/$name.headers"
}
code() { cat "$tmp/$1.code"; }
header() { sed -n "s/^$2: //p" "$tmp/$1.headers" | head -n 1; }

# burst LABEL URL CAPACITY POLICY [curl args...]: CAPACITY requests pass with RateLimit headers,
# then (within three more) one is refused with 429, Retry-After and Floodgate's JSON body.
burst() {
  local label=$1 url=$2 capacity=$3 policy=$4; shift 4
  local i name remaining
  for ((i = 1; i <= capacity; i++)); do
    name="$label-$i"
    request "$name" "$url" "$@"
    if [ "$(code "$name")" != 200 ]; then
      fail "$label: request $i answered $(code "$name"), want 200: $(cat "$tmp/$name.body")"
      return
    fi
    remaining=$(header "$name" ratelimit-remaining)
    if [ "$(header "$name" ratelimit-limit)" != "$capacity" ] || ! [[ $remaining =~ ^[0-9]+$ ]] ||
      [ -z "$(header "$name" ratelimit-reset)" ] || ! grep -q "^ratelimit-policy: \"$policy\";q=$capacity;w=" "$tmp/$name.headers" ||
      [ -n "$(header "$name" x-ratelimit-degraded)" ]; then
      fail "$label: request $i lacks the RateLimit headers of $policy:"
      cat "$tmp/$name.headers" >&2
      return
    fi
  done
  pass "$label: $capacity requests allowed, each with RateLimit headers (last remaining: $remaining)"
  for ((i = capacity + 1; i <= capacity + 3; i++)); do
    name="$label-$i"
    request "$name" "$url" "$@"
    [ "$(code "$name")" = 429 ] && break
  done
  if [ "$(code "$name")" != 429 ]; then
    fail "$label: no 429 after $capacity allowed requests (last: $(code "$name"))"
    return
  fi
  local retry body
  retry=$(header "$name" retry-after)
  body=$(cat "$tmp/$name.body")
  if ! [[ $retry =~ ^[1-9][0-9]*$ ]]; then
    fail "$label: 429 without a positive Retry-After (got '$retry')"
  elif [ "$(header "$name" content-type)" != application/json ]; then
    fail "$label: 429 content-type is '$(header "$name" content-type)', want application/json"
  elif [ "$body" != "{\"error\":\"rate_limited\",\"policy\":\"$policy\",\"retry_after\":$retry}" ]; then
    fail "$label: 429 body is $body"
  elif [ "$(header "$name" ratelimit-remaining)" != 0 ]; then
    fail "$label: 429 with ratelimit-remaining '$(header "$name" ratelimit-remaining)', want 0"
  else
    pass "$label: then 429, Retry-After: $retry, body $body"
  fi
}

echo "building and starting (docker compose up -d --build)"
"${COMPOSE[@]}" up -d --build

wait_until "Envoy is live" curl -fsS "$ENVOY_ADMIN/ready"
wait_until "Envoy (jwt) is live" curl -fsS "$ENVOY_JWT_ADMIN/ready"
wait_until "Envoy sees $FLOODGATE_REPLICAS healthy Floodgate replicas" healthy_hosts "$ENVOY_ADMIN" "$FLOODGATE_REPLICAS"
wait_until "Envoy (jwt) sees a healthy Floodgate" healthy_hosts "$ENVOY_JWT_ADMIN" 1
wait_until "Envoy (rls) is live" curl -fsS "$ENVOY_RLS_ADMIN/ready"
wait_until "Envoy (rls) sees $RLS_REPLICAS healthy Floodgate replicas" healthy_hosts "$ENVOY_RLS_ADMIN" "$RLS_REPLICAS"
wait_until "the upstream answers through Envoy" curl -fsS "$ENVOY/v1/items" -H "x-api-key: warmup-$$"

# The health route has ext_authz disabled: it never carries RateLimit headers.
request healthz "$ENVOY/healthz"
if [ "$(code healthz)" = 200 ] && [ -z "$(header healthz ratelimit-limit)" ]; then
  pass "/healthz bypasses Floodgate"
else
  fail "/healthz: $(code healthz), ratelimit-limit '$(header healthz ratelimit-limit)'"
fi

# One API key, alternating between the two replicas by Envoy's round robin: one shared bucket.
burst search "$ENVOY/v1/search?q=floodgate" "$SEARCH_CAPACITY" "$SEARCH_POLICY" -H "x-api-key: e2e-$$-$RANDOM"

# JWT: no token → 401 from jwt_authn; alice runs out; bob still has his own bucket.
alice=$(tr -d '\n' <../envoy/jwt/demo-token-alice.jwt)
bob=$(tr -d '\n' <../envoy/jwt/demo-token-bob.jwt)
request notoken "$ENVOY_JWT/v1/items"
if [ "$(code notoken)" = 401 ]; then pass "jwt: no token → 401"; else fail "jwt: no token → $(code notoken), want 401"; fi
burst jwt-alice "$ENVOY_JWT/v1/items" "$JWT_CAPACITY" "$JWT_POLICY" -H "authorization: Bearer $alice"
request bob "$ENVOY_JWT/v1/items" -H "authorization: Bearer $bob"
if [ "$(code bob)" = 200 ]; then pass "jwt: bob is not limited by alice's bucket"; else fail "jwt: bob → $(code bob), want 200"; fi

# The rate limit service (Envoy's rate limit filter, draft-03 X-RateLimit headers): one API key,
# spread over both replicas by round robin, spends one shared bucket of RLS_BURST ($RLS_LIMIT), then
# Envoy answers 429 marked x-envoy-ratelimited.
rls_key="rls-$$-$RANDOM"
rls_ok=1
for ((i = 1; i <= RLS_BURST; i++)); do
  request "rls-$i" "$ENVOY_RLS/v1/items" -H "x-api-key: $rls_key"
  remaining=$(header "rls-$i" x-ratelimit-remaining)
  if [ "$(code "rls-$i")" != 200 ] || ! [[ $remaining =~ ^[0-9]+$ ]] || [ -z "$(header "rls-$i" x-ratelimit-limit)" ]; then
    fail "rls: request $i answered $(code "rls-$i") with x-ratelimit-remaining '$remaining', want 200 with X-RateLimit headers"
    rls_ok=0
    break
  fi
done
if ((rls_ok)); then
  pass "rls: $RLS_BURST requests allowed with X-RateLimit headers (last remaining: $remaining)"
  for ((i = RLS_BURST + 1; i <= RLS_BURST + 3; i++)); do
    request "rls-$i" "$ENVOY_RLS/v1/items" -H "x-api-key: $rls_key"
    [ "$(code "rls-$i")" = 429 ] && break
  done
  if [ "$(code "rls-$i")" != 429 ]; then
    fail "rls: no 429 after $RLS_BURST allowed requests (last: $(code "rls-$i"))"
  elif [ "$(header "rls-$i" x-envoy-ratelimited)" != true ] || [ "$(header "rls-$i" x-ratelimit-remaining)" != 0 ]; then
    fail "rls: 429 without x-envoy-ratelimited: true and x-ratelimit-remaining: 0:"
    cat "$tmp/rls-$i.headers" >&2
  else
    pass "rls: then 429, x-envoy-ratelimited, x-ratelimit-reset: $(header "rls-$i" x-ratelimit-reset)"
  fi
fi
request rls-other "$ENVOY_RLS/v1/items" -H "x-api-key: rls-other-$$"
if [ "$(code rls-other)" = 200 ]; then pass "rls: another key has its own bucket"; else fail "rls: another key → $(code rls-other), want 200"; fi

# Redis gone: Floodgate's failure mode (store.on_failure: allow) lets requests through, marked.
"${COMPOSE[@]}" stop redis >/dev/null
degraded() {
  request degraded "$ENVOY/v1/items" -H "x-api-key: degraded-$$"
  [ "$(code degraded)" = 200 ] && [ "$(header degraded x-ratelimit-degraded)" = true ]
}
wait_until "Redis stopped: allowed with x-ratelimit-degraded: true" degraded

if ((failures > 0)); then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "all checks passed"
