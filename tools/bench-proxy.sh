#!/usr/bin/env bash
# bench-proxy.sh [BUILD_DIR]: measures sluice-proxy against Squid and tinyproxy, and its DNS path
# against dnsmasq, in one run inside a private lab (tests/lib/lab.sh: its own network, mount and pid
# namespaces; no packet leaves them). Needs root and the bench packages (tools/deps.sh --bench).
# Not part of the test suite. Prints a table of medians over BENCH_ROUNDS (default 3) rounds, whose order
# rotates, with ratios; BENCH_SECONDS (default 8) per measurement.
#
#   small requests: wrk, keep-alive, 50 connections, a tiny response from a fast origin (bench-origin)
#   latency:        wrk with 1 connection; p50/p99 and what each proxy adds over the direct path
#   CONNECT bulk:   curl through a CONNECT tunnel (curl -p) downloading 4 GiB, vs the direct path
#                   (the session routed straight to the origin, no proxy)
#   DNS:            dnsperf against sluice's DNS proxy and against dnsmasq forwarding (no cache, and
#                   with its cache), all relaying to the same upstream dnsmasq
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
export SLUICE_SOURCE_DIR=$src SLUICE_BUILD_DIR=${1:-${SLUICE_BUILD_DIR:-$src/build}}
SLUICE_BUILD_DIR=$(cd "$SLUICE_BUILD_DIR" && pwd) || exit 2
. "$src/tests/lib/tap.sh"
. "$src/tests/lib/lab.sh"
. "$src/tests/lib/proxy-lab.sh"
lab_enter "$@"
# Everything below runs inside the lab's own namespaces.
_lab_need wrk dnsperf squid tinyproxy curl dnsmasq
secs=${BENCH_SECONDS:-8}
ORIGIN_PORT=9080
UPSTREAM_DNS=198.18.0.54

lab_internet_up >/dev/null
lab_session s1 >/dev/null
read -r S_ADDR GW _ < <(lab_session_info s1)

# A fast origin, and an upstream DNS server without query logging (the lab's logs every query).
lab_bg origin -n inet "$SLUICE_BUILD_DIR/tools/bench-origin" 0.0.0.0 "$ORIGIN_PORT"
ip -n inet addr add "$UPSTREAM_DNS/24" dev eth0
printf '%s\n' no-resolv no-hosts no-poll "addn-hosts=$LAB_DIR/dns/hosts" "listen-address=$UPSTREAM_DNS" \
	bind-interfaces local=/test/ "pid-file=$LAB_DIR/state/upstream-dns.pid" user=root group=root \
	>"$LAB_DIR/upstream-dns.conf"
echo "$LAB_ALLOWED4 bench.test" >>"$LAB_DIR/dns/hosts"
lab_bg upstream-dns -n inet dnsmasq --keep-in-foreground --conf-file="$LAB_DIR/upstream-dns.conf"
lab_wait_port inet 198.18.1.11 "$ORIGIN_PORT" 5 || lab_bail "bench-origin did not start"

# ---- the proxies, all in the host namespace on the session's gateway
proxy_start s1 "{\"allow\": [{\"host\": \"allowed.test\", \"ports\": [$ORIGIN_PORT]}, \"bench.test\", \"registry.test\"]}"
sed -i "s/\"upstream_dns\": \"[^\"]*\"/\"upstream_dns\": \"$UPSTREAM_DNS:53\"/" "$LAB_DIR/proxy/config-s1.json"
lab_stop proxy
lab_bg proxy "$SLUICE_BUILD_DIR/proxy/sluice-proxy" --config "$LAB_DIR/proxy/config-s1.json"
lab_wait_port s1 "$GW" 3128 5 || lab_bail "sluice-proxy did not restart"

mkdir -p "$LAB_DIR/squid" "$LAB_DIR/tinyproxy" && chmod 0777 "$LAB_DIR/squid" "$LAB_DIR/tinyproxy"
printf '%s\n' "http_port $GW:3129" "http_access allow all" "cache deny all" "dns_nameservers $UPSTREAM_DNS" \
	"hosts_file none" "pinger_enable off" "workers 1" "access_log stdio:$LAB_DIR/squid/access.log" \
	"cache_log $LAB_DIR/squid/cache.log" "pid_filename $LAB_DIR/squid/squid.pid" \
	"coredump_dir $LAB_DIR/squid" "cache_effective_user proxy" "shutdown_lifetime 0 seconds" \
	>"$LAB_DIR/squid/squid.conf"
lab_bg squid squid -N -f "$LAB_DIR/squid/squid.conf"
printf '%s\n' "User nobody" "Group nogroup" "Port 3130" "Listen $GW" "Timeout 600" \
	"LogFile \"$LAB_DIR/tinyproxy/tinyproxy.log\"" "LogLevel Warning" "MaxClients 200" "Allow $S_ADDR" \
	>"$LAB_DIR/tinyproxy/tinyproxy.conf"
lab_bg tinyproxy tinyproxy -d -c "$LAB_DIR/tinyproxy/tinyproxy.conf"
for v in nocache:5353:0 cache:5354:10000; do
	IFS=: read -r name port size <<<"$v"
	printf '%s\n' no-resolv no-hosts no-poll "server=$UPSTREAM_DNS" "listen-address=$GW" bind-interfaces \
		"port=$port" "cache-size=$size" dns-forward-max=10000 "pid-file=$LAB_DIR/state/dm-$name.pid" \
		user=root group=root \
		>"$LAB_DIR/dnsmasq-$name.conf"
	lab_bg "dm-$name" dnsmasq --keep-in-foreground --conf-file="$LAB_DIR/dnsmasq-$name.conf"
done
for p in 3129 3130; do lab_wait_port s1 "$GW" "$p" 10 || lab_bail "proxy on port $p did not start"; done
lab_forward on # the direct path: the session routed straight to the origin

# ---- measurements
printf '%s\n' "request = function()" \
	"  return wrk.format(\"GET\", \"http://allowed.test:$ORIGIN_PORT/\", { [\"Host\"] = \"allowed.test:$ORIGIN_PORT\" })" \
	"end" >"$LAB_DIR/proxy.lua"
# wrk_run PORT|direct CONNS: prints "requests/s p50_ms p99_ms [non2xx=N]"
wrk_run() {
	local where=$1 conns=$2 out threads=2
	[ "$conns" -ge 2 ] || threads=1
	if [ "$where" = direct ]; then
		out=$(lab_exec s1 wrk -t "$threads" -c "$conns" -d "${secs}s" --latency "http://$LAB_ALLOWED4:$ORIGIN_PORT/")
	else
		out=$(lab_exec s1 wrk -t "$threads" -c "$conns" -d "${secs}s" --latency -s "$LAB_DIR/proxy.lua" "http://$GW:$where/")
	fi
	awk '
		function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; if (v ~ /s$/) return v * 1000; return v }
		/Requests\/sec/ { rps = $2 }
		/^ +50%/ { p50 = ms($2) }
		/^ +99%/ { p99 = ms($2) }
		/Non-2xx/ { bad = $NF }
		END { printf "%.0f %.3f %.3f %s\n", rps, p50, p99, bad ? "non2xx=" bad : "-" }' <<<"$out"
}
bulk_bytes=$((4 * 1024 * 1024 * 1024))
# bulk_run PORT|direct: prints MB/s of a 4 GiB download (0 if it did not complete)
bulk_run() {
	local where=$1 out speed size
	if [ "$where" = direct ]; then
		out=$(lab_exec s1 curl -sS --noproxy '*' -o /dev/null -w '%{speed_download} %{size_download}' \
			"http://$LAB_ALLOWED4:$ORIGIN_PORT/bytes/$bulk_bytes")
	else
		out=$(lab_exec s1 curl -sS -p -x "http://$GW:$where" --noproxy '' -o /dev/null \
			-w '%{speed_download} %{size_download}' "http://allowed.test:$ORIGIN_PORT/bytes/$bulk_bytes")
	fi
	read -r speed size <<<"$out"
	[ "${size:-0}" = "$bulk_bytes" ] || { echo 0; return; }
	awk -v s="$speed" 'BEGIN { printf "%.0f\n", s / 1e6 }'
}
printf '%s\n' "allowed.test A" "bench.test A" "allowed.test AAAA" "registry.test A" >"$LAB_DIR/dnsq.txt"
dns_run() {
	lab_exec s1 dnsperf -s "$GW" -p "$1" -d "$LAB_DIR/dnsq.txt" -l "$secs" -c 8 -T 2 -q 100 -t 2 \
		>"$LAB_DIR/dnsperf-$1.txt" 2>&1
	[ -n "${BENCH_VERBOSE:-}" ] && grep -E 'Queries|Response codes' "$LAB_DIR/dnsperf-$1.txt" | sed "s/^/# $1: /" >&2
	awk '/Queries per second/ { printf "%.0f\n", $4 }' "$LAB_DIR/dnsperf-$1.txt"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else printf "n/a" }'; }
add() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a - b }'; }

declare -A R
rounds=${BENCH_ROUNDS:-3}
# median of the values given
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
[ "${BENCH_ONLY:-}" = dns ] || { echo "# warming up"; wrk_run 3128 10 >/dev/null; }
order=(3128 3129 3130 direct)
dorder=(53 5353 5354)
declare -A S # space-separated samples per cell
for ((round = 1; round <= rounds; round++)); do
	# Rounds rotate the order, so load from other work on the machine lands on every contender alike.
	for ((k = 0; k < 4; k++)); do
		[ "${BENCH_ONLY:-}" = dns ] && break
		p=${order[(k + round) % 4]}
		echo "# round $round: via $p"
		read -r rps _ _ bad < <(wrk_run "$p" 50)
		read -r _ p50 p99 _ < <(wrk_run "$p" 1)
		S[rps_$p]+=" $rps" S[p50_$p]+=" $p50" S[p99_$p]+=" $p99" S[bulk_$p]+=" $(bulk_run "$p")"
		[ "$bad" = - ] || R[bad_$p]=$bad
	done
	for ((k = 0; k < 3; k++)); do
		p=${dorder[(k + round) % 3]}
		echo "# round $round: DNS via port $p"
		S[dns_$p]+=" $(dns_run "$p")"
	done
done
for key in "${!S[@]}"; do
	# shellcheck disable=SC2086
	R[$key]=$(median ${S[$key]})
done
for p in 3128 3129 3130; do : "${R[bad_$p]:=-}"; done
R[dns_sluice]=${R[dns_53]:-0} R[dns_nocache]=${R[dns_5353]:-0} R[dns_cache]=${R[dns_5354]:-0}
sleep 0.5
audit_lines=$(wc -l <"$PROXY_AUDIT")

row() { printf '%-42s %12s %12s %12s %12s\n' "$@"; }
echo
echo "sluice-proxy benchmark ($(nproc) CPUs, ${secs} s per run, median of $rounds rounds, kernel $(uname -r))"
row "" sluice squid tinyproxy direct
row "small requests/s (keep-alive, 50 conns)" "${R[rps_3128]}" "${R[rps_3129]}" "${R[rps_3130]}" "${R[rps_direct]}"
row "latency p50 ms (1 conn)" "${R[p50_3128]}" "${R[p50_3129]}" "${R[p50_3130]}" "${R[p50_direct]}"
row "latency p99 ms (1 conn)" "${R[p99_3128]}" "${R[p99_3129]}" "${R[p99_3130]}" "${R[p99_direct]}"
row "added latency p50 ms" "$(add "${R[p50_3128]}" "${R[p50_direct]}")" "$(add "${R[p50_3129]}" "${R[p50_direct]}")" \
	"$(add "${R[p50_3130]}" "${R[p50_direct]}")" -
row "added latency p99 ms" "$(add "${R[p99_3128]}" "${R[p99_direct]}")" "$(add "${R[p99_3129]}" "${R[p99_direct]}")" \
	"$(add "${R[p99_3130]}" "${R[p99_direct]}")" -
row "CONNECT bulk MB/s (4 GiB download)" "${R[bulk_3128]}" "${R[bulk_3129]}" "${R[bulk_3130]}" "${R[bulk_direct]}"
echo
printf '%-42s %12s %12s %14s\n' "DNS queries/s (dnsperf, 8 clients)" sluice dnsmasq "dnsmasq+cache"
printf '%-42s %12s %12s %14s\n' "" "${R[dns_sluice]}" "${R[dns_nocache]}" "${R[dns_cache]}"
echo
echo "ratios (targets in brackets):"
echo "  small-request rate sluice/squid      $(ratio "${R[rps_3128]}" "${R[rps_3129]}")   [>= 2]"
echo "  small-request rate sluice/tinyproxy  $(ratio "${R[rps_3128]}" "${R[rps_3130]}")"
echo "  CONNECT bulk sluice/direct           $(ratio "${R[bulk_3128]}" "${R[bulk_direct]}")   [>= 0.9]"
echo "  CONNECT bulk sluice/squid            $(ratio "${R[bulk_3128]}" "${R[bulk_3129]}")"
echo "  DNS sluice/dnsmasq (no cache)        $(ratio "${R[dns_sluice]}" "${R[dns_nocache]}")   [>= 1]"
echo "  DNS sluice/dnsmasq (with cache)      $(ratio "${R[dns_sluice]}" "${R[dns_cache]}")"
echo "  sluice wrote $audit_lines audit lines; non-2xx: sluice ${R[bad_3128]} squid ${R[bad_3129]} tinyproxy ${R[bad_3130]}"
