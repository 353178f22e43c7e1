#!/usr/bin/env bash
# bench-transparent.sh [BUILD_DIR]: the transparent path (nftables redirect, Host / SNI read by the engine)
# against the explicit-proxy path (absolute-form HTTP and CONNECT) through the same sluiced, in a private lab
# (tests/lib/lab.sh; no packet leaves it). Needs root, wrk and openssl. Not part of the test suite.
#
#   HTTP:  wrk, keep-alive, 50 connections, BENCH_SECONDS (default 8) each, against bench-origin on port 80
#   HTTPS: ROUNDS (default 300) sequential new connections, each a full TLS handshake and one GET, against
#          openssl s_server on port 443 (CONNECT + TLS through the proxy, or TLS to the address directly)
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
export SLUICE_SOURCE_DIR=$src SLUICE_BUILD_DIR=${1:-${SLUICE_BUILD_DIR:-$src/build}}
SLUICE_BUILD_DIR=$(cd "$SLUICE_BUILD_DIR" && pwd) || exit 2
. "$src/tests/lib/tap.sh"
. "$src/tests/lib/lab.sh"
lab_enter "$@"
_lab_need wrk openssl curl "$LAB_PYTHON"
secs=${BENCH_SECONDS:-8} rounds=${ROUNDS:-300}
B=$SLUICE_BUILD_DIR RUN=/run/sluice GW4=100.64.0.1
export SLUICE_RUN_DIR=$RUN

lab_internet_up >/dev/null
lab_forward on
lab_stop fakenet-inet # the lab's Python servers would be what gets measured: fast origins instead
lab_bg origin -n inet "$B/tools/bench-origin" 0.0.0.0 80
lab_bg tls -n inet openssl s_server -quiet -accept 443 -www -cert "$LAB_DIR/tls/server.pem" \
	-key "$LAB_DIR/tls/server.key"
lab_wait_port inet "$LAB_ALLOWED4" 80 5 || lab_bail "bench-origin did not start"
lab_wait_port inet "$LAB_ALLOWED4" 443 5 || lab_bail "openssl s_server did not start"

mkdir -p "$LAB_DIR/etc-sluice"
echo '{ "options": {"transparent": true}, "allow": ["allowed.test"] }' >"$LAB_DIR/tmp/p.json"
chmod 0644 "$LAB_DIR/tmp/p.json"
lab_bg sluiced "$B/netd/sluiced" --run-dir "$RUN" --audit-log "$LAB_DIR/audit.log" --pool4 100.64.0.0/16 \
	--pool6 2001:db8:100::/64 --upstream-dns "$LAB_DNS" --sysconfdir "$LAB_DIR/etc-sluice"
for _ in $(seq 200); do "$B/tests/integration/netd-testclient" list >/dev/null 2>&1 && break; sleep 0.05; done
ip netns add t1
"$B/tests/integration/netd-testclient" attach /run/netns/t1 "$LAB_DIR/tmp/p.json" bench </dev/null \
	>"$LAB_DIR/state/t1.reply" 2>&1 &
lab_defer "kill -TERM $! 2>/dev/null; wait $! 2>/dev/null"
for _ in $(seq 100); do grep -q '^proxy_port=' "$LAB_DIR/state/t1.reply" && break; sleep 0.05; done
grep -q '^proxy_port=' "$LAB_DIR/state/t1.reply" || lab_bail "the session did not open"

# the absolute form as wrk's static request (formatted once, as the transparent run's is): a Lua request()
# function would cost wrk CPU per request that the transparent run does not pay (docs/proxy.md)
printf '%s\n' 'wrk.path = "http://allowed.test/"' 'wrk.headers["Host"] = "allowed.test"' >"$LAB_DIR/proxy.lua"
wrk_rps() { awk '/Requests\/sec/ { print $2 }'; }
lab_exec t1 wrk -t 2 -c 10 -d 2s -s "$LAB_DIR/proxy.lua" "http://$GW4:3128/" >/dev/null # warm-up
p_rps=$(lab_exec t1 wrk -t 2 -c 50 -d "${secs}s" -s "$LAB_DIR/proxy.lua" "http://$GW4:3128/" | wrk_rps)
t_rps=$(lab_exec t1 wrk -t 2 -c 50 -d "${secs}s" -H "Host: allowed.test" "http://$LAB_ALLOWED4/" | wrk_rps)

tls_rate() { # MODE: proxy|transparent -> connections per second
	lab_exec t1 "$LAB_PYTHON" - "$1" "$rounds" "$GW4" "$LAB_ALLOWED4" "$LAB_CA" <<-'PY'
		import socket, ssl, sys, time
		mode, n, gw, addr, ca = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
		ctx = ssl.create_default_context(cafile=ca)
		t0 = time.monotonic()
		for _ in range(n):
		    if mode == "proxy":
		        s = socket.create_connection((gw, 3128))
		        s.sendall(b"CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n")
		        head = b""
		        while b"\r\n\r\n" not in head:
		            head += s.recv(1024)
		        assert head.startswith(b"HTTP/1.1 200"), head
		    else:
		        s = socket.create_connection((addr, 443))
		    t = ctx.wrap_socket(s, server_hostname="allowed.test")
		    t.sendall(b"GET / HTTP/1.0\r\n\r\n")
		    while t.recv(65536):
		        pass
		    t.close()
		print("%.1f" % (n / (time.monotonic() - t0)))
	PY
}
p_tls=$(tls_rate proxy)
t_tls=$(tls_rate transparent)

echo "# transparent vs explicit proxy (sluiced, same lab, same origin)"
printf '%-40s %12s %12s %8s\n' "" "proxy" "transparent" "ratio"
printf '%-40s %12s %12s %8s\n' "HTTP keep-alive, 50 conns (req/s)" "$p_rps" "$t_rps" \
	"$(awk -v a="$t_rps" -v b="$p_rps" 'BEGIN { if (b > 0) printf "%.2f", a / b }')"
printf '%-40s %12s %12s %8s\n' "HTTPS new connection + GET (conn/s)" "$p_tls" "$t_tls" \
	"$(awk -v a="$t_tls" -v b="$p_tls" 'BEGIN { if (b > 0) printf "%.2f", a / b }')"
grep -c '"protocol":"tls-sni"' "$LAB_DIR/audit.log" | sed 's/^/# tls-sni audit lines: /'
