#!/usr/bin/env bash
# A proxy in front of Floodgate's HTTP door, from zero, in one command:
#   make try-nginx | make try-haproxy | make try-caddy      (or: bash e2e/try.sh nginx)
# Runs, until Ctrl-C, all on loopback and in a temporary directory:
#   - Floodgate on its embedded sample policy (in-memory buckets: a burst of 5, then 1 a second per
#     caller), with its HTTP door on and http_authz set as the recipe's header comment says;
#   - floodgate-demo-app, the application, which answers with what reached it;
#   - the proxy, from the recipe as shipped (e2e/PROXY/), with only its addresses replaced when the
#     ports below are changed.
# Then, in another terminal: curl -i http://127.0.0.1:8080/api/items (six times: the sixth is a 429).
#
# Ports (environment): TRY_PORT (the proxy, 8080), TRY_GRPC_PORT (nginx's gRPC listener, 8443),
# TRY_DOOR_PORT (the door, 9193), TRY_APP_PORT (the application, 8081), TRY_GRPC_APP_PORT (8082),
# TRY_GRPC_LISTEN (Floodgate's ext_authz, 9191), TRY_ADMIN_PORT (its admin port, 9192); TRY_ABNS, the
# name of HAProxy's floodgate-authz socket.
set -euo pipefail
cd "$(dirname "$0")/.."

proxy=${1:-}
port=${TRY_PORT:-8080}
grpc_port=${TRY_GRPC_PORT:-8443}
door=${TRY_DOOR_PORT:-9193}
app=${TRY_APP_PORT:-8081}
grpc_app=${TRY_GRPC_APP_PORT:-8082}
ext_authz=${TRY_GRPC_LISTEN:-9191}
admin=${TRY_ADMIN_PORT:-9192}
abns=${TRY_ABNS:-floodgate-authz}

case "$proxy" in
nginx | haproxy)
	headers="original_uri_header: X-Original-URI, original_method_header: X-Original-Method" ;;
caddy)
	headers="original_uri_header: X-Forwarded-Uri, original_method_header: X-Forwarded-Method" ;;
*)
	echo "usage: $0 nginx|haproxy|caddy (Traefik's recipe runs in its test harness only: e2e/traefik)" >&2
	exit 2 ;;
esac
bin=$(command -v "$proxy" || true)
if [ -z "$bin" ] && [ -x "/usr/sbin/$proxy" ]; then bin=/usr/sbin/$proxy; fi
if [ -z "$bin" ]; then
	echo "$proxy is not installed: 'sudo apt-get install $proxy' (Debian/Ubuntu), or 'make proxies' as root" >&2
	exit 1
fi

dir=$(mktemp -d)
chmod 755 "$dir" # nginx's workers, when started as root, run as another user
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

go build -o "$dir/floodgate" ./cmd/floodgate
go build -o "$dir/floodgate-demo-app" ./cmd/floodgate-demo-app

# The embedded default, with the door on.
{
	sed -e "s/127.0.0.1:9191/127.0.0.1:$ext_authz/" \
		-e "s/^  admin: 127.0.0.1:9192$/  admin: 127.0.0.1:$admin\n  http: 127.0.0.1:$door/" internal/config/default.yaml
	echo "http_authz: { $headers }"
} >"$dir/floodgate.yaml"

# The recipe, its addresses replaced (nothing changes with the default ports).
render() {
	sed -e "s/127.0.0.1:8080/127.0.0.1:$port/g" -e "s#http://:8080#http://:$port#g" \
		-e "s/127.0.0.1:8443/127.0.0.1:$grpc_port/g" -e "s/127.0.0.1:9193/127.0.0.1:$door/g" \
		-e "s/127.0.0.1:8081/127.0.0.1:$app/g" -e "s/127.0.0.1:8082/127.0.0.1:$grpc_app/g" \
		-e "s/abns@floodgate-authz/abns@$abns/g" "$1"
}

"$dir/floodgate" serve --config "$dir/floodgate.yaml" &
pids+=($!)
"$dir/floodgate-demo-app" --listen "127.0.0.1:$app" &
pids+=($!)

case "$proxy" in
nginx)
	render e2e/nginx/nginx.conf >"$dir/nginx.conf"
	global="daemon off;"
	if [ "$(id -u)" = 0 ]; then global="$global user root;"; fi
	"$bin" -p "$dir/" -c "$dir/nginx.conf" -e "$dir/error.log" -g "$global" &
	pids+=($!) ;;
haproxy)
	render e2e/haproxy/haproxy.cfg >"$dir/haproxy.cfg"
	cp e2e/haproxy/floodgate.lua "$dir/"
	(cd "$dir" && exec "$bin" -db -f haproxy.cfg) &
	pids+=($!) ;;
caddy)
	render e2e/caddy/Caddyfile >"$dir/Caddyfile"
	HOME=$dir XDG_CONFIG_HOME=$dir/config XDG_DATA_HOME=$dir/data "$bin" run --config "$dir/Caddyfile" --adapter caddyfile &
	pids+=($!) ;;
esac

# Ready when every port of this run answers: the proxy's (nginx's gRPC one too), the door's, the
# application's and the admin port (bash's /dev/tcp: no curl needed).
ports="$port $door $app $admin"
if [ "$proxy" = nginx ]; then ports="$ports $grpc_port"; fi
answers() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for _ in $(seq 150); do
	waiting=""
	for p in $ports; do answers "$p" || waiting="$waiting $p"; done
	[ -z "$waiting" ] && break
	sleep 0.1
done
if [ -n "$waiting" ]; then
	echo "nothing answers on 127.0.0.1, port(s)$waiting, after 15 s: is another program on one? (TRY_PORT and the others move them)" >&2
	exit 1
fi
cat <<EOF

$proxy on 127.0.0.1:$port, in front of Floodgate's HTTP door (127.0.0.1:$door) and the demo application
(127.0.0.1:$app); Floodgate's metrics on http://127.0.0.1:$admin/metrics. Try, in another terminal:

  for i in 1 2 3 4 5 6; do curl -s -o /dev/null -w '%{http_code}\n' http://127.0.0.1:$port/api/items; done
  curl -i http://127.0.0.1:$port/api/items              # the 429: Retry-After, RateLimit headers, JSON body
  curl -i -H 'x-api-key: mine' http://127.0.0.1:$port/api/items   # another caller, its own burst

The recipe ran from $dir; Ctrl-C stops everything.
EOF
wait -n "${pids[@]}"
echo "a process exited: stopping ($proxy's log, if any, is printed above)" >&2
exit 1
