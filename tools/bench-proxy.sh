#!/usr/bin/env bash
# bench-proxy.sh [BUILD_DIR]: measures sluice-proxy against Squid and tinyproxy in one run inside a
# private lab (tests/lib/lab.sh: its own network, mount and pid namespaces; no packet leaves them), after
# tools/bench-dns.sh for the DNS path. Needs root and the bench packages (tools/deps.sh --bench).
# Not part of the test suite. Prints a table of medians over BENCH_ROUNDS (default 3) rounds, whose order
# rotates, with ratios; BENCH_SECONDS (default 8) per measurement.
#
#   small requests: wrk, keep-alive, 50 connections, a tiny response from a fast origin (bench-origin)
#   latency:        wrk with 1 connection; p50/p99 and what each proxy adds over the direct path
#   bulk:           curl downloading BENCH_BULK_MIB (default 1024) MiB: through a CONNECT tunnel (curl -p),
#                   and as forward-proxy GETs (curl -x) with a Content-Length and chunked; vs the direct
#                   path (the session routed straight to the origin, no proxy); MB/s and the proxy's CPU
#                   seconds per GiB (utime+stime of its process over the download)
#   DNS:            tools/bench-dns.sh, before the rest (BENCH_ONLY=dns: only that; =http: not that).
#                   This script once measured DNS itself, with allowed names only and dnsmasq as a plain
#                   forwarder, and reported sluice ahead where the allowlisting case (bench-dns) had it
#                   behind (issue 16); bench-dns measures the allowlist work both do, with denied names.
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
export SLUICE_SOURCE_DIR=$src SLUICE_BUILD_DIR=${1:-${SLUICE_BUILD_DIR:-$src/build}}
SLUICE_BUILD_DIR=$(cd "$SLUICE_BUILD_DIR" && pwd) || exit 2
if [ -z "${LAB_INSIDE:-}" ]; then
	case ${BENCH_ONLY:-} in
	dns) exec "$src/tools/bench-dns.sh" "$SLUICE_BUILD_DIR" ;;
	http) ;;
	*) "$src/tools/bench-dns.sh" "$SLUICE_BUILD_DIR" || exit ;;
	esac
fi
. "$src/tests/lib/tap.sh"
. "$src/tests/lib/lab.sh"
. "$src/tests/lib/proxy-lab.sh"
lab_enter "$@"
# Everything below runs inside the lab's own namespaces.
_lab_need wrk squid tinyproxy curl dnsmasq
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
bulk_bytes=$((${BENCH_BULK_MIB:-1024} * 1024 * 1024))
declare -A PIDNAME=([3128]=proxy [3129]=squid [3130]=tinyproxy)
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# bulk_run PORT|direct connect|length|chunked: prints "MB/s cpu_s_per_GiB" of a download of bulk_bytes
# (0 if it did not complete; "-" for the CPU of the direct path)
bulk_run() {
	local where=$1 kind=$2 out speed size url pid= t0 t1 cpu=-
	url=http://allowed.test:$ORIGIN_PORT/bytes/$bulk_bytes
	[ "$kind" = chunked ] && url=http://allowed.test:$ORIGIN_PORT/chunked/$bulk_bytes
	if [ "$where" = direct ]; then
		out=$(lab_exec s1 curl -sS --noproxy '*' -o /dev/null -w '%{speed_download} %{size_download}' \
			--resolve "allowed.test:$ORIGIN_PORT:$LAB_ALLOWED4" "$url")
	else
		pid=$(lab_pid "${PIDNAME[$where]}")
		t0=$(cpu_ticks "$pid")
		out=$(lab_exec s1 curl -sS $([ "$kind" = connect ] && echo -p) -x "http://$GW:$where" --noproxy '' \
			-o /dev/null -w '%{speed_download} %{size_download}' "$url")
		t1=$(cpu_ticks "$pid")
		cpu=$(awk -v t="$((t1 - t0))" -v hz="$(getconf CLK_TCK)" -v b="$bulk_bytes" \
			'BEGIN { printf "%.2f", t / hz / (b / 1073741824) }')
	fi
	read -r speed size <<<"$out"
	[ "${size:-0}" = "$bulk_bytes" ] || { echo "0 $cpu"; return; }
	awk -v s="$speed" -v c="$cpu" 'BEGIN { printf "%.0f %s\n", s / 1e6, c }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else printf "n/a" }'; }
add() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a - b }'; }

declare -A R
rounds=${BENCH_ROUNDS:-3}
# median of the values given
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "# warming up"
wrk_run 3128 10 >/dev/null
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
order=(3128 3129 3130 direct)
declare -A S # space-separated samples per cell
for ((round = 1; round <= rounds; round++)); do
	# Rounds rotate the order, so load from other work on the machine lands on every contender alike.
	for ((k = 0; k < 4; k++)); do
		p=${order[(k + round) % 4]}
		echo "# round $round: via $p"
		read -r rps _ _ bad < <(wrk_run "$p" 50)
		read -r _ p50 p99 _ < <(wrk_run "$p" 1)
		S[rps_$p]+=" $rps" S[p50_$p]+=" $p50" S[p99_$p]+=" $p99"
		for kind in connect length chunked; do
			read -r mbs cpu < <(bulk_run "$p" "$kind")
			echo "# round $round: via $p: $kind bulk $mbs MB/s, $cpu CPU s/GiB"
			S[bulk_${kind}_$p]+=" $mbs"
			[ "$cpu" = - ] || S[cpu_${kind}_$p]+=" $cpu"
		done
		[ "$bad" = - ] || R[bad_$p]=$bad
	done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
for key in "${!S[@]}"; do
	# shellcheck disable=SC2086
	R[$key]=$(median ${S[$key]})
done
for p in 3128 3129 3130; do : "${R[bad_$p]:=-}"; done
sleep 0.5
audit_lines=$(wc -l <"$PROXY_AUDIT")

row() { printf '%-42s %12s %12s %12s %12s\n' "$@"; }
echo
echo "sluice-proxy benchmark ($(nproc) CPUs, ${secs} s per run, median of $rounds rounds, kernel $(uname -r))"
echo "load average before: $load_before, after: $load_after"
row "" sluice squid tinyproxy direct
row "small requests/s (keep-alive, 50 conns)" "${R[rps_3128]}" "${R[rps_3129]}" "${R[rps_3130]}" "${R[rps_direct]}"
row "latency p50 ms (1 conn)" "${R[p50_3128]}" "${R[p50_3129]}" "${R[p50_3130]}" "${R[p50_direct]}"
row "latency p99 ms (1 conn)" "${R[p99_3128]}" "${R[p99_3129]}" "${R[p99_3130]}" "${R[p99_direct]}"
row "added latency p50 ms" "$(add "${R[p50_3128]}" "${R[p50_direct]}")" "$(add "${R[p50_3129]}" "${R[p50_direct]}")" \
	"$(add "${R[p50_3130]}" "${R[p50_direct]}")" -
row "added latency p99 ms" "$(add "${R[p99_3128]}" "${R[p99_direct]}")" "$(add "${R[p99_3129]}" "${R[p99_direct]}")" \
	"$(add "${R[p99_3130]}" "${R[p99_direct]}")" -
mib=${BENCH_BULK_MIB:-1024}
for kind in connect length chunked; do
	case $kind in
	connect) what="CONNECT bulk" ;; length) what="GET bulk, Content-Length" ;; chunked) what="GET bulk, chunked" ;;
	esac
	row "$what MB/s ($mib MiB)" "${R[bulk_${kind}_3128]}" "${R[bulk_${kind}_3129]}" "${R[bulk_${kind}_3130]}" \
		"${R[bulk_${kind}_direct]}"
	row "  proxy CPU s per GiB" "${R[cpu_${kind}_3128]}" "${R[cpu_${kind}_3129]}" "${R[cpu_${kind}_3130]}" -
done
echo
echo "ratios (targets in brackets):"
echo "  small-request rate sluice/squid      $(ratio "${R[rps_3128]}" "${R[rps_3129]}")   [>= 2]"
echo "  small-request rate sluice/tinyproxy  $(ratio "${R[rps_3128]}" "${R[rps_3130]}")"
echo "  CONNECT bulk sluice/direct           $(ratio "${R[bulk_connect_3128]}" "${R[bulk_connect_direct]}")   [>= 0.9]"
echo "  CONNECT bulk sluice/squid            $(ratio "${R[bulk_connect_3128]}" "${R[bulk_connect_3129]}")"
echo "  GET bulk (length) sluice/direct      $(ratio "${R[bulk_length_3128]}" "${R[bulk_length_direct]}")   [>= 0.8, <= 1 CPU s/GiB]"
echo "  GET bulk (length) sluice/squid       $(ratio "${R[bulk_length_3128]}" "${R[bulk_length_3129]}")"
echo "  GET bulk (chunked) sluice/direct     $(ratio "${R[bulk_chunked_3128]}" "${R[bulk_chunked_direct]}")   [>= 0.8, <= 1 CPU s/GiB]"
echo "  GET bulk (chunked) sluice/squid      $(ratio "${R[bulk_chunked_3128]}" "${R[bulk_chunked_3129]}")"
echo "  sluice wrote $audit_lines audit lines; non-2xx: sluice ${R[bad_3128]} squid ${R[bad_3129]} tinyproxy ${R[bad_3130]}"
