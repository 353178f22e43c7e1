#!/usr/bin/env bash
# bench-parent.sh [BUILD_DIR]: what sluice costs in front of a parent (corporate) proxy (issue 20): the
# same client work through sluice-proxy chained to Squid (sluice -> parent) and straight to Squid (direct ->
# parent), in one run inside a private lab (tests/lib/lab.sh; no packet leaves it). Squid with Basic auth
# runs in the lab's internet namespace next to a fast origin (bench-origin). Needs root and the bench
# packages (tools/deps.sh --bench). Not part of the test suite.
#
#   small requests: wrk, keep-alive, BENCH_CONNS (default 50) connections, a tiny response
#   CONNECT bulk:   curl -p downloading BENCH_BULK_MIB (default 256) MiB through the tunnel
#
# Prints medians over BENCH_ROUNDS (default 3) rotating rounds of BENCH_SECONDS (default 8) s, the ratios,
# and one JSON line (prefix "json: ") with the same figures.
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
export SLUICE_SOURCE_DIR=$src SLUICE_BUILD_DIR=${1:-${SLUICE_BUILD_DIR:-$src/build}}
SLUICE_BUILD_DIR=$(cd "$SLUICE_BUILD_DIR" && pwd) || exit 2
. "$src/tests/lib/tap.sh"
. "$src/tests/lib/lab.sh"
. "$src/tests/lib/proxy-lab.sh"
lab_enter "$@"
_lab_need wrk squid curl openssl
secs=${BENCH_SECONDS:-8} rounds=${BENCH_ROUNDS:-3} conns=${BENCH_CONNS:-50}
mib=${BENCH_BULK_MIB:-256} bulk_bytes=$((${BENCH_BULK_MIB:-256} * 1024 * 1024))
ORIGIN_PORT=9080 PARENT=$LAB_INET4:3128

lab_internet_up >/dev/null
lab_session s1 >/dev/null
read -r _ GW _ < <(lab_session_info s1)
lab_bg origin -n inet "$SLUICE_BUILD_DIR/tools/bench-origin" 0.0.0.0 "$ORIGIN_PORT"
lab_wait_port inet "$LAB_ALLOWED4" "$ORIGIN_PORT" 5 || lab_bail "bench-origin did not start"

# ---- the parent: Squid with Basic auth in the internet namespace
SQ=$LAB_DIR/squid
mkdir -p "$SQ" && chmod 0777 "$SQ"
printf 'bench:%s\n' "$(openssl passwd -apr1 bench-pw)" >"$SQ/passwd"
printf '%s\n' "http_port $PARENT" "pid_filename $SQ/squid.pid" "access_log none" "cache_log $SQ/cache.log" \
	"cache deny all" "coredump_dir $SQ" "dns_nameservers $LAB_DNS" "pinger_enable off" "workers 1" \
	"shutdown_lifetime 0 seconds" "cache_effective_user proxy" \
	"auth_param basic program /usr/lib/squid/basic_ncsa_auth $SQ/passwd" "auth_param basic realm bench" \
	"acl authed proxy_auth REQUIRED" "acl SSL_ports port $ORIGIN_PORT" "acl CONNECT method CONNECT" \
	"http_access deny !authed" "http_access allow authed" "http_access deny all" >"$SQ/squid.conf"
lab_bg squid -n inet squid -N -f "$SQ/squid.conf"
lab_wait_port inet "$LAB_INET4" 3128 10 || lab_bail "squid did not start"
install -m 600 /dev/null "$LAB_DIR/parent-auth"
echo "bench:bench-pw" >"$LAB_DIR/parent-auth"

# ---- sluice-proxy on the session's gateway, chained to the parent
PROXY_EXTRA_CONFIG="\"upstream_proxy\": {\"url\": \"http://$PARENT\", \"auth_file\": \"$LAB_DIR/parent-auth\"},"
proxy_start s1 "{\"allow\": [{\"host\": \"allowed.test\", \"ports\": [$ORIGIN_PORT]}]}"
lab_forward on # direct -> parent: the session reaches Squid itself

AUTH=$(printf 'bench:bench-pw' | base64)
printf '%s\n' "request = function()" \
	"  return wrk.format(\"GET\", \"http://allowed.test:$ORIGIN_PORT/\", { [\"Host\"] = \"allowed.test:$ORIGIN_PORT\", [\"Proxy-Authorization\"] = \"Basic $AUTH\" })" \
	"end" >"$LAB_DIR/req.lua"
# wrk_run sluice|parent: requests/s and p99 ms
wrk_run() {
	local to=$GW:3128
	[ "$1" = parent ] && to=$PARENT
	lab_exec s1 wrk -t 2 -c "$conns" -d "${secs}s" --latency -s "$LAB_DIR/req.lua" "http://$to/" | awk '
		function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; if (v ~ /s$/) return v * 1000; return v }
		/Requests\/sec/ { rps = $2 } /^ +99%/ { p99 = ms($2) } /Non-2xx/ { bad = $NF }
		END { printf "%.0f %.3f %s\n", rps, p99, bad ? bad : 0 }'
}
# bulk_run sluice|parent: MB/s of a CONNECT download (0 if incomplete)
bulk_run() {
	local out speed size
	if [ "$1" = parent ]; then
		out=$(lab_exec s1 curl -sS -p -x "http://$PARENT" -U bench:bench-pw --noproxy '' -o /dev/null \
			-w '%{speed_download} %{size_download}' "http://allowed.test:$ORIGIN_PORT/bytes/$bulk_bytes")
	else
		out=$(lab_exec s1 curl -sS -p -x "http://$GW:3128" --noproxy '' -o /dev/null \
			-w '%{speed_download} %{size_download}' "http://allowed.test:$ORIGIN_PORT/bytes/$bulk_bytes")
	fi
	read -r speed size <<<"$out"
	[ "${size:-0}" = "$bulk_bytes" ] || { echo 0; return; }
	awk -v s="$speed" 'BEGIN { printf "%.0f\n", s / 1e6 }'
}
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else printf "n/a" }'; }

echo "# warming up"
wrk_run sluice >/dev/null
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
declare -A S R
order=(sluice parent)
for ((round = 1; round <= rounds; round++)); do
	for ((k = 0; k < 2; k++)); do
		w=${order[(k + round) % 2]}
		read -r rps p99 bad < <(wrk_run "$w")
		mbs=$(bulk_run "$w")
		echo "# round $round: $w: $rps req/s, p99 $p99 ms, non-2xx $bad; CONNECT bulk $mbs MB/s"
		S[rps_$w]+=" $rps" S[p99_$w]+=" $p99" S[bulk_$w]+=" $mbs"
		[ "$bad" = 0 ] || R[bad_$w]=$bad
	done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
for key in "${!S[@]}"; do
	# shellcheck disable=SC2086
	R[$key]=$(median ${S[$key]})
done
row() { printf '%-40s %14s %14s %8s\n' "$@"; }
echo
echo "sluice in front of a parent proxy ($(nproc) CPUs, ${secs} s runs, median of $rounds rounds, Squid $(squid -v | sed -n 's/.*Version \([0-9.]*\).*/\1/p'))"
echo "load average before: $load_before, after: $load_after"
row "" "sluice->parent" "direct->parent" ratio
row "small requests/s (keep-alive, $conns conns)" "${R[rps_sluice]}" "${R[rps_parent]}" "$(ratio "${R[rps_sluice]}" "${R[rps_parent]}")"
row "latency p99 ms" "${R[p99_sluice]}" "${R[p99_parent]}" "$(ratio "${R[p99_sluice]}" "${R[p99_parent]}")"
row "CONNECT bulk MB/s ($mib MiB)" "${R[bulk_sluice]}" "${R[bulk_parent]}" "$(ratio "${R[bulk_sluice]}" "${R[bulk_parent]}")"
echo "non-2xx: sluice ${R[bad_sluice]:-0}, direct ${R[bad_parent]:-0}; audit lines written by sluice: $(wc -l <"$PROXY_AUDIT")"
printf 'json: {"cpus": %s, "seconds": %s, "rounds": %s, "rps": {"sluice": %s, "parent": %s}, "p99_ms": {"sluice": %s, "parent": %s}, "connect_mbs": {"sluice": %s, "parent": %s}}\n' \
	"$(nproc)" "$secs" "$rounds" "${R[rps_sluice]}" "${R[rps_parent]}" "${R[p99_sluice]}" "${R[p99_parent]}" \
	"${R[bulk_sluice]}" "${R[bulk_parent]}"
done_testing
