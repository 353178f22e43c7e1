#!/usr/bin/env bash
# bench-proxy.sh [BUILD_DIR]: measures sluice-proxy against Squid and tinyproxy in one run inside a
# private lab (tests/lib/lab.sh: its own network, mount and pid namespaces; no packet leaves them), after
# tools/bench-dns.sh for the DNS path (dnsmasq, unbound). Needs root and the bench packages
# (tools/deps.sh --bench). Not part of the test suite. Prints a table of medians over BENCH_ROUNDS
# (default 3) rounds, whose order rotates, the goals of issue 16 with the ratios measured and whether each
# is met, and writes it all as JSON to BENCH_JSON (default BUILD_DIR/bench-proxy.json; the DNS results
# under "dns"). BENCH_SECONDS (default 8) per measurement.
#
#   keep-alive:     wrk, BENCH_CONNS (default 64) keep-alive connections, a tiny response from the origin
#                   (BENCH_ORIGIN): requests/s, p50/p99, the proxy's CPU per request; and wrk with 1
#                   connection for the latency a proxy adds
#   new connection: ab -c1 (HTTP/1.0, a new connection per request, one at a time): requests/s, p50/p99
#                   (ab's percentiles, -e), the proxy's CPU per request
#   bulk:           curl downloading BENCH_BULK_MIB (default 1024) MiB: through a CONNECT tunnel (curl -p),
#                   and as forward-proxy GETs (curl -x) with a Content-Length and chunked; vs the direct
#                   path (the session routed straight to the origin, no proxy); MB/s and the proxy's CPU
#                   seconds per GiB
#   DNS:            tools/bench-dns.sh, before the rest (BENCH_ONLY=dns: only that; =http: not that).
#                   This script once measured DNS itself, with allowed names only and dnsmasq as a plain
#                   forwarder, and reported sluice ahead where the allowlisting case (bench-dns) had it
#                   behind (issue 16); bench-dns measures the allowlist work both do, with denied names.
# BENCH_ORIGIN: nginx (the default: issue 16's own origin; one process, one worker, no access log) or
# bench-origin (tools/bench-origin.c, libevent's evhttp: the origin of the figures before 2026-11-27
# 17:30), serving the same three resources (below, where it starts); BENCH_AB, BENCH_MACHINE, BENCH_PERF
# work with either. docs/proxy.md ("The origin") has the figures of both and why nginx is the default.
# BENCH_PERF=DIR records a perf profile (perf record -g) of sluice-proxy during its keep-alive and
# new-connection runs of the first round into DIR/perf-{keepalive,newconn}.data, and BENCH_STRACE=DIR its
# system calls (strace -c) into DIR/strace-{keepalive,newconn}.txt (in another run: strace slows it down).
# CPU is utime+stime of the proxy's process from /proc/PID/stat over the measurement: on a shared machine
# it is steadier than a rate. The direct path has no proxy, so no CPU figure.
# BENCH_AB=OTHER_BUILD_DIR (with BENCH_ONLY=http): instead of the peers, this build's sluice-proxy ("A",
# port 3128) against OTHER's ("B", port 3131, e.g. main's build) and the direct path, in the same lab, on
# the keep-alive and new-connection rows, the order rotating each round; prints every run and the medians
# (A/B and A/direct), no JSON. For measuring a change on a shared machine. BENCH_AB_BULK=1: the bulk rows
# (CONNECT, GET with a length, chunked: MB/s and each proxy's CPU s/GiB) instead; with BENCH_SYSCALLS=1
# also each proxy's system calls per GiB (perf stat on the raw_syscalls tracepoint: no slowing down).
# BENCH_CALLGRIND=DIR (with BENCH_AB): both sluice-proxy processes run under callgrind (their event loop
# only) on the keep-alive row alone (at valgrind's pace: the rates mean nothing), and the instructions each
# spent per request (its close records) are printed, in all and without libcrypto (SHA-256 of the audit
# chain, which under valgrind takes a path without the CPU's SHA instructions): user-space work that the
# machine's load does not move; DIR/callgrind-{A,B}.out for callgrind_annotate.
# BENCH_MACHINE=DIR (with BENCH_ONLY=http): where the whole machine's CPU goes per keep-alive request, through
# sluice-proxy and on the direct path (and BENCH_AB's build): the CPU of wrk, the origin and the proxy, their
# context switches, TCP segments per namespace (nstat), system calls (strace), and a perf profile of the
# three by kernel area (tools/perf-areas.py); BENCH_MACHINE_WHO picks the contenders (e.g. "3128 3128n
# direct directn": an n runs with sluiced's nftables ruleset loaded in the host namespace). See
# tools/bench-machine.sh.
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
export SLUICE_SOURCE_DIR=$src SLUICE_BUILD_DIR=${1:-${SLUICE_BUILD_DIR:-$src/build}}
SLUICE_BUILD_DIR=$(cd "$SLUICE_BUILD_DIR" && pwd) || exit 2
if [ -z "${LAB_INSIDE:-}" ]; then
	case ${BENCH_ONLY:-} in
	dns) exec "$src/tools/bench-dns.sh" "$SLUICE_BUILD_DIR" ;;
	http) ;;
	*)
		export BENCH_DNS_JSON=$SLUICE_BUILD_DIR/bench-dns.json
		rm -f "$BENCH_DNS_JSON"
		BENCH_JSON=$BENCH_DNS_JSON "$src/tools/bench-dns.sh" "$SLUICE_BUILD_DIR" || exit
		;;
	esac
fi
. "$src/tests/lib/tap.sh"
. "$src/tests/lib/lab.sh"
. "$src/tests/lib/proxy-lab.sh"
lab_enter "$@"
# Everything below runs inside the lab's own namespaces.
_lab_need wrk ab squid tinyproxy curl dnsmasq
secs=${BENCH_SECONDS:-8}
ORIGIN_PORT=9080
UPSTREAM_DNS=198.18.0.54

lab_internet_up >/dev/null
lab_session s1 >/dev/null
read -r S_ADDR GW _ < <(lab_session_info s1)

# The origin (BENCH_ORIGIN), and an upstream DNS server without query logging (the lab's logs every query).
bulk_bytes=$((${BENCH_BULK_MIB:-1024} * 1024 * 1024))
origin=${BENCH_ORIGIN:-nginx}
case $origin in
bench-origin) lab_bg origin -n inet "$SLUICE_BUILD_DIR/tools/bench-origin" 0.0.0.0 "$ORIGIN_PORT" ;;
nginx)
	# nginx (tools/bench-nginx.sh: one process, one worker) serving what bench-origin serves: "/" the same
	# 29-byte JSON body from memory (nginx adds "Server: nginx" and "Connection: keep-alive"), "/bytes/N"
	# a sparse file of N bytes (sendfile, with a Content-Length), "/chunked/N" the same file without its
	# length: the addition filter (an empty add_after_body) clears the length, so an HTTP/1.1 client gets it
	# chunked, unscanned (sub_filter and SSI would parse every byte; gzip would compress it). Read through
	# one 256 KiB buffer instead of sendfile: chunks of 256 KiB, like bench-origin's (with sendfile the
	# whole file is one chunk)
	_lab_need nginx
	W=$LAB_DIR/nginx
	mkdir -p "$W/www/bytes" && chmod -R 0755 "$W"
	truncate -s "$bulk_bytes" "$W/www/bytes/$bulk_bytes"
	: >"$W/www/empty"
	. "$src/tools/bench-nginx.sh"
	bench_nginx origin "$W" "    listen $ORIGIN_PORT;
    location = / { default_type application/json; return 200 '{\"ok\":true,\"origin\":\"bench\"}\\n'; }
    location /bytes/ { alias $W/www/bytes/; default_type application/octet-stream; }
    location /chunked/ {
      alias $W/www/bytes/; default_type application/octet-stream;
      add_after_body /empty; addition_types application/octet-stream;
      sendfile off; output_buffers 1 256k;
    }
    location = /empty { internal; root $W/www; }"
	;;
*) lab_bail "BENCH_ORIGIN: '$origin' is neither nginx nor bench-origin" ;;
esac
ip -n inet addr add "$UPSTREAM_DNS/24" dev eth0
printf '%s\n' no-resolv no-hosts no-poll "addn-hosts=$LAB_DIR/dns/hosts" "listen-address=$UPSTREAM_DNS" \
	bind-interfaces local=/test/ local-ttl=300 "pid-file=$LAB_DIR/state/upstream-dns.pid" user=root group=root \
	>"$LAB_DIR/upstream-dns.conf"
echo "$LAB_ALLOWED4 bench.test" >>"$LAB_DIR/dns/hosts"
lab_bg upstream-dns -n inet dnsmasq --keep-in-foreground --conf-file="$LAB_DIR/upstream-dns.conf"
lab_wait_port inet 198.18.1.11 "$ORIGIN_PORT" 5 ||
	lab_bail "the origin ($origin) did not start: $(tail -n 3 "$(lab_log origin)" "$LAB_DIR/nginx/error.log" 2>/dev/null)"

# ---- the proxies, all in the host namespace on the session's gateway
proxy_start s1 "{\"allow\": [{\"host\": \"allowed.test\", \"ports\": [$ORIGIN_PORT]}, \"bench.test\", \"registry.test\"]}"
sed -i "s/\"upstream_dns\": \"[^\"]*\"/\"upstream_dns\": \"$UPSTREAM_DNS:53\"/" "$LAB_DIR/proxy/config-s1.json"
lab_stop proxy
# callgrind_of A|B: the command prefix that runs a sluice-proxy under callgrind (BENCH_CALLGRIND), or nothing
callgrind_of() {
	[ -n "${BENCH_CALLGRIND:-}" ] || return 0
	echo valgrind --tool=callgrind --toggle-collect=event_base_loop \
		"--callgrind-out-file=$BENCH_CALLGRIND/callgrind-$1.out"
}
if [ -n "${BENCH_CALLGRIND:-}" ]; then
	[ -n "${BENCH_AB:-}" ] || lab_bail "BENCH_CALLGRIND needs BENCH_AB"
	mkdir -p "$BENCH_CALLGRIND" && rm -f "$BENCH_CALLGRIND"/callgrind-[AB].out
fi
# (the proxy drops root: the profile it writes at its exit goes to a file it may write)
cg_writable() { [ -z "${BENCH_CALLGRIND:-}" ] || chmod 0666 "$BENCH_CALLGRIND/callgrind-$1.out"; }
lab_bg proxy $(callgrind_of A) "$SLUICE_BUILD_DIR/proxy/sluice-proxy" --config "$LAB_DIR/proxy/config-s1.json"
lab_wait_port s1 "$GW" 3128 $([ -n "${BENCH_CALLGRIND:-}" ] && echo 60 || echo 5) || lab_bail "sluice-proxy did not restart"
cg_writable A

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
# ab opens a connection per request: let the client and the proxies reuse ports in TIME_WAIT (per netns)
for ns in s1 host; do
	lab_exec "$ns" sysctl -qw net.ipv4.tcp_tw_reuse=1 net.ipv4.ip_local_port_range="1024 65000" ||
		lab_bail "cannot set the port range in $ns"
done
# wrk's request through a proxy: the absolute form. Set as wrk's static request (formatted once, sent as
# is), as the direct path's is: a request() function would run Lua for every request, on wrk's CPU, which
# the direct path does not (1.5-2.8 us a request on this VM, tools/bench-machine.sh; the bytes are the same)
printf '%s\n' "wrk.path = \"http://allowed.test:$ORIGIN_PORT/\"" "wrk.headers[\"Host\"] = \"allowed.test:$ORIGIN_PORT\"" \
	>"$LAB_DIR/proxy.lua"
printf '%s\n' "request = function()" \
	"  return wrk.format(\"GET\", \"http://allowed.test:$ORIGIN_PORT/\", { [\"Host\"] = \"allowed.test:$ORIGIN_PORT\" })" \
	"end" >"$LAB_DIR/proxy-dynamic.lua"
conns=${BENCH_CONNS:-64}
declare -A PIDNAME=([3128]=proxy [3129]=squid [3130]=tinyproxy)
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# cpu_per CONTENDER T0 COUNT SCALE: the contender's CPU since tick count T0, per COUNT units, times SCALE
# ("-" for the direct path)
cpu_per() {
	local where=$1 t0=$2 count=$3 scale=$4 t1
	[ "$where" != direct ] || { echo -; return; }
	t1=$(cpu_ticks "$(lab_pid "${PIDNAME[$where]}")")
	awk -v t="$((t1 - t0))" -v hz="$(getconf CLK_TCK)" -v n="$count" -v k="$scale" \
		'BEGIN { if (n > 0) printf "%.2f", t / hz / n * k; else print "-" }'
}
# watch_start WHAT: starts the profilers asked for on sluice-proxy (round 1 only) for a run of $secs seconds;
# watch_end waits for them
watchers=()
watch_start() {
	local pid
	watchers=()
	[ "${round:-0}" = 1 ] && [ "$p" = 3128 ] || return 0
	pid=$(lab_pid proxy)
	if [ -n "${BENCH_PERF:-}" ]; then
		perf record -q -F 2999 -g -p "$pid" -o "$BENCH_PERF/perf-$1.data" -- sleep "$secs" >/dev/null 2>&1 &
		watchers+=($!)
	fi
	if [ -n "${BENCH_STRACE:-}" ]; then
		timeout -s INT "$secs" strace -c -f -p "$pid" -o "$BENCH_STRACE/strace-$1.txt" >/dev/null 2>&1 &
		watchers+=($!)
	fi
}
watch_end() { [ ${#watchers[@]} -eq 0 ] || wait "${watchers[@]}"; }
ticks_of() { [ "$1" = direct ] && echo 0 || cpu_ticks "$(lab_pid "${PIDNAME[$1]}")"; }

# wrk_run PORT|direct CONNS: prints "requests/s p50_ms p99_ms cpu_us_per_request non2xx|-"
wrk_run() {
	local where=$1 conns=$2 out threads=2 t0
	[ "$conns" -ge 2 ] || threads=1
	t0=$(ticks_of "$where")
	if [ "$where" = direct ]; then
		out=$(lab_exec s1 wrk -t "$threads" -c "$conns" -d "${secs}s" --latency "http://$LAB_ALLOWED4:$ORIGIN_PORT/")
	else
		out=$(lab_exec s1 wrk -t "$threads" -c "$conns" -d "${secs}s" --latency -s "$LAB_DIR/proxy.lua" "http://$GW:$where/")
	fi
	read -r rps p50 p99 bad n < <(awk '
		function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; if (v ~ /s$/) return v * 1000; return v }
		/Requests\/sec/ { rps = $2 }
		/^ +50%/ { p50 = ms($2) }
		/^ +99%/ { p99 = ms($2) }
		/Non-2xx/ { bad = $NF }
		/requests in/ { n = $1 }
		END { printf "%.0f %.3f %.3f %s %d\n", rps, p50, p99, bad ? bad : "-", n }' <<<"$out")
	echo "$rps $p50 $p99 $(cpu_per "$where" "$t0" "$n" 1e6) $bad"
}
# ab_run PORT|direct: a new connection per request, one at a time (ab -c1, HTTP/1.0 without keep-alive);
# prints "requests/s p50_ms p99_ms cpu_us_per_request failed" (failed: failed + non-2xx)
ab_run() {
	local where=$1 csv=$LAB_DIR/ab.csv out t0 n
	t0=$(ticks_of "$where")
	if [ "$where" = direct ]; then
		out=$(lab_exec s1 ab -q -c 1 -t "$secs" -n 200000 -e "$csv" "http://$LAB_ALLOWED4:$ORIGIN_PORT/" 2>&1)
	else
		out=$(lab_exec s1 ab -q -c 1 -t "$secs" -n 200000 -e "$csv" -X "$GW:$where" \
			"http://allowed.test:$ORIGIN_PORT/" 2>&1)
	fi
	n=$(awk '/^Complete requests:/ { print $3 }' <<<"$out")
	read -r rps bad < <(awk '/^Requests per second:/ { rps = $4 } /^Failed requests:/ { f += $3 }
		/^Non-2xx responses:/ { f += $3 } END { printf "%.0f %d\n", rps, f }' <<<"$out")
	read -r p50 p99 < <(awk -F, '$1 == 50 { a = $2 } $1 == 99 { b = $2 } END { printf "%.3f %.3f\n", a, b }' "$csv")
	echo "$rps $p50 $p99 $(cpu_per "$where" "$t0" "${n:-0}" 1e6) $bad"
}
# bulk_run PORT|direct connect|length|chunked: prints "MB/s cpu_s_per_GiB syscalls_per_GiB" of a download
# of bulk_bytes (0 if it did not complete; "-" for the CPU of the direct path, and for the system calls
# without BENCH_SYSCALLS)
bulk_run() {
	local where=$1 kind=$2 out speed size url t0 sc=- scpid= scf=$LAB_DIR/bulk-syscalls.txt
	url=http://allowed.test:$ORIGIN_PORT/bytes/$bulk_bytes
	[ "$kind" = chunked ] && url=http://allowed.test:$ORIGIN_PORT/chunked/$bulk_bytes
	t0=$(ticks_of "$where")
	if [ -n "${BENCH_SYSCALLS:-}" ] && [ "$where" != direct ]; then
		perf stat -x, -e raw_syscalls:sys_enter -p "$(lab_pid "${PIDNAME[$where]}")" -o "$scf" 2>/dev/null &
		scpid=$!
		sleep 0.2
	fi
	if [ "$where" = direct ]; then
		out=$(lab_exec s1 curl -sS --noproxy '*' -o /dev/null -w '%{speed_download} %{size_download}' \
			--resolve "allowed.test:$ORIGIN_PORT:$LAB_ALLOWED4" "$url")
	else
		out=$(lab_exec s1 curl -sS $([ "$kind" = connect ] && echo -p) -x "http://$GW:$where" --noproxy '' \
			-o /dev/null -w '%{speed_download} %{size_download}' "$url")
	fi
	if [ -n "$scpid" ]; then
		kill -INT "$scpid"
		wait "$scpid"
		sc=$(awk -F, -v b="$bulk_bytes" '/raw_syscalls:sys_enter/ { printf "%.0f", $1 * 1073741824 / b }' "$scf")
	fi
	read -r speed size <<<"$out"
	[ "${size:-0}" = "$bulk_bytes" ] || { echo "0 - -"; return; }
	echo "$(awk -v s="$speed" 'BEGIN { printf "%.0f", s / 1e6 }') $(cpu_per "$where" "$t0" "$bulk_bytes" 1073741824) ${sc:--}"
}
# bulk_rows PORT|direct LABEL: the three bulk downloads, printed and added to S (round: the round's number)
bulk_rows() {
	local kind mbs cpu sc
	for kind in connect length chunked; do
		read -r mbs cpu sc < <(bulk_run "$1" "$kind")
		echo "# round $round: $2: $kind bulk $mbs MB/s, $cpu CPU s/GiB$([ "$sc" = - ] || echo ", $sc system calls/GiB")"
		S[bulk_${kind}_$1]+=" $mbs" S[cpu_${kind}_$1]+=" $cpu" S[sc_${kind}_$1]+=" $sc"
	done
}
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

if [ -n "${BENCH_MACHINE:-}" ]; then
	. "$src/tools/bench-machine.sh"
	exit
fi

if [ -n "${BENCH_AB:-}" ]; then
	sed -e 's/:3128"/:3131"/g' -e '/"kind": "dns"/s/:53"/:5354"/' -e "s|\"audit_log\": \"[^\"]*\"|\"audit_log\": \"$PROXY_AUDIT.b\"|" \
		"$LAB_DIR/proxy/config-s1.json" >"$LAB_DIR/proxy/config-b.json"
	lab_bg proxyb $(callgrind_of B) "$BENCH_AB/proxy/sluice-proxy" --config "$LAB_DIR/proxy/config-b.json"
	lab_wait_port s1 "$GW" 3131 $([ -n "${BENCH_CALLGRIND:-}" ] && echo 60 || echo 5) ||
		lab_bail "the B sluice-proxy ($BENCH_AB) did not start"
	cg_writable B
	PIDNAME[3131]=proxyb
	declare -A AB=([3128]=A [3131]=B [direct]=direct)
	wrk_run 3128 10 >/dev/null
	wrk_run 3131 10 >/dev/null
	echo "# A: $SLUICE_BUILD_DIR, B: $BENCH_AB, origin $origin; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
	declare -A S
	order=(3128 3131 direct)
	for ((round = 1; round <= ${BENCH_ROUNDS:-3}; round++)); do
		for ((k = 0; k < 3; k++)); do
			p=${order[(k + round) % 3]}
			if [ -n "${BENCH_AB_BULK:-}" ]; then
				bulk_rows "$p" "${AB[$p]}"
				continue
			fi
			watch_start keepalive
			read -r rps p50 p99 cpu bad < <(wrk_run "$p" "$conns")
			watch_end
			echo "# round $round: ${AB[$p]}: keep-alive $rps req/s, p50 $p50 ms, p99 $p99 ms, $cpu us CPU/req, non-2xx $bad"
			S[ka_rps_$p]+=" $rps" S[ka_p99_$p]+=" $p99" S[ka_cpu_$p]+=" $cpu"
			[ -z "${BENCH_CALLGRIND:-}" ] || continue
			watch_start newconn
			read -r rps p50 p99 cpu bad < <(ab_run "$p")
			watch_end
			echo "# round $round: ${AB[$p]}: new connection $rps req/s, p50 $p50 ms, p99 $p99 ms, $cpu us CPU/req, failed $bad"
			S[nc_rps_$p]+=" $rps" S[nc_p99_$p]+=" $p99" S[nc_cpu_$p]+=" $cpu"
		done
	done
	echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
	if [ -n "${BENCH_CALLGRIND:-}" ]; then
		lab_stop proxy
		lab_stop proxyb
		for x in A B; do
			log=$PROXY_AUDIT
			[ "$x" = A ] || log=$PROXY_AUDIT.b
			n=$(grep -c '"event":"close"' "$log")
			callgrind_annotate "$BENCH_CALLGRIND/callgrind-$x.out" 2>/dev/null | awk -v x="$x" -v n="$n" '
				/PROGRAM TOTALS/ { gsub(",", "", $1); t = $1 }
				/libcrypto/ && $1 ~ /^[0-9,]+$/ { gsub(",", "", $1); c += $1 }
				END { if (n > 0) printf "callgrind %s: %d requests, %.0f instructions/request, %.0f without libcrypto\n", x, n, t / n, (t - c) / n }'
		done
	fi
	rows="ka_rps ka_p99 ka_cpu $([ -n "${BENCH_CALLGRIND:-}" ] || echo nc_rps nc_p99 nc_cpu)"
	[ -z "${BENCH_AB_BULK:-}" ] || rows="bulk_connect cpu_connect bulk_length cpu_length bulk_chunked cpu_chunked"
	[ -z "${BENCH_AB_BULK:-}" ] || [ -z "${BENCH_SYSCALLS:-}" ] || rows+=" sc_connect sc_length sc_chunked"
	for m in $rows; do
		a=$(median ${S[${m}_3128]}) b=$(median ${S[${m}_3131]}) d=$(median ${S[${m}_direct]} 2>/dev/null)
		awk -v m="$m" -v a="$a" -v b="$b" -v d="$d" 'BEGIN { printf "%-7s A %10s  B %10s  A/B %.3f", m, a, b, b ? a / b : 0;
			if (m ~ /rps|p99|bulk/ && d != "" && d != "-" && d > 0) printf "  direct %10s  A/direct %.3f  B/direct %.3f", d, a / d, b / d; print "" }'
	done
	exit 0
fi

rounds=${BENCH_ROUNDS:-3}
echo "# warming up"
wrk_run 3128 10 >/dev/null
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
order=(3128 3129 3130 direct)
declare -A S # space-separated samples per cell, keyed MEASURE_CONTENDER
declare -A BAD
for ((round = 1; round <= rounds; round++)); do
	# Rounds rotate the order, so load from other work on the machine lands on every contender alike.
	for ((k = 0; k < 4; k++)); do
		p=${order[(k + round) % 4]}
		watch_start keepalive
		read -r rps p50 p99 cpu bad < <(wrk_run "$p" "$conns")
		watch_end
		echo "# round $round: via $p: keep-alive $rps req/s, p50 $p50 ms, p99 $p99 ms, $cpu us CPU/req, non-2xx $bad"
		S[ka_rps_$p]+=" $rps" S[ka_p50_$p]+=" $p50" S[ka_p99_$p]+=" $p99" S[ka_cpu_$p]+=" $cpu"
		[ "$bad" = - ] || BAD[$p]+=" keep-alive:$bad"
		read -r _ p50 p99 _ _ < <(wrk_run "$p" 1)
		S[one_p50_$p]+=" $p50" S[one_p99_$p]+=" $p99"
		watch_start newconn
		read -r rps p50 p99 cpu bad < <(ab_run "$p")
		watch_end
		echo "# round $round: via $p: new connection each $rps req/s, p50 $p50 ms, p99 $p99 ms, $cpu us CPU/req, failed $bad"
		S[nc_rps_$p]+=" $rps" S[nc_p50_$p]+=" $p50" S[nc_p99_$p]+=" $p99" S[nc_cpu_$p]+=" $cpu"
		[ "$bad" = 0 ] || BAD[$p]+=" new-connection:$bad"
		bulk_rows "$p" "via $p"
	done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
sleep 0.5
audit_lines=$(wc -l <"$PROXY_AUDIT")

# ---- the report: medians, ratios against the goals of issue 16, and JSON
BENCH_JSON=${BENCH_JSON:-$SLUICE_BUILD_DIR/bench-proxy.json}
{
	for key in "${!S[@]}"; do echo "sample $key ${S[$key]}"; done
	for p in "${!BAD[@]}"; do echo "bad $p ${BAD[$p]}"; done
} >"$LAB_DIR/samples"
"$LAB_PYTHON" - "$LAB_DIR/samples" "$BENCH_JSON" "${BENCH_DNS_JSON:-}" <<PY
import json, os, statistics, sys
samples, out, dns_json = sys.argv[1:4]
S, bad = {}, {}
for line in open(samples):
    kind, key, *vals = line.split()
    if kind == "sample":
        S[key] = [float(v) for v in vals if v != "-"]
    else:
        bad[key] = " ".join(vals)
names = {"3128": "sluice", "3129": "squid", "3130": "tinyproxy", "direct": "direct"}
def med(m, p):
    v = S.get(f"{m}_{p}", [])
    return statistics.median(v) if v else None
rows = [("ka_rps", "keep-alive small GET req/s (wrk -c $conns)"), ("ka_p50", "  p50 ms"), ("ka_p99", "  p99 ms"),
        ("ka_cpu", "  proxy CPU us/request"), ("one_p50", "1 connection (wrk -c1) p50 ms"), ("one_p99", "  p99 ms"),
        ("nc_rps", "new connection per GET req/s (ab -c1)"), ("nc_p50", "  p50 ms"), ("nc_p99", "  p99 ms"),
        ("nc_cpu", "  proxy CPU us/request"),
        ("bulk_connect", "CONNECT bulk MB/s (${BENCH_BULK_MIB:-1024} MiB)"), ("cpu_connect", "  proxy CPU s/GiB"),
        ("bulk_length", "GET bulk, Content-Length MB/s"), ("cpu_length", "  proxy CPU s/GiB"),
        ("bulk_chunked", "GET bulk, chunked MB/s"), ("cpu_chunked", "  proxy CPU s/GiB")]
res = {names[p]: {m: med(m, p) for m, _ in rows} for p in names}
def fmt(v):
    return "-" if v is None else (f"{v:.0f}" if v >= 100 else f"{v:.3g}")
print()
print(f"sluice-proxy benchmark ({os.cpu_count()} CPUs, ${secs} s per run, median of $rounds rounds, kernel {os.uname().release}, origin $origin)")
print("load average before: $load_before, after: $load_after")
print(f"{'':44}" + "".join(f"{n:>11}" for n in names.values()))
for m, label in rows:
    print(f"{label:44}" + "".join(f"{fmt(res[n][m]):>11}" for n in names.values()))
def ratio(a, b):
    return None if a is None or not b else round(a / b, 3)
s, q, d = res["sluice"], res["squid"], res["direct"]
goals = [
    ("bulk GET (Content-Length) / direct", ratio(s["bulk_length"], d["bulk_length"]), ">=", 0.8),
    ("bulk GET (Content-Length) proxy CPU s/GiB", s["cpu_length"], "<=", 1.0),
    ("bulk GET (chunked) / direct", ratio(s["bulk_chunked"], d["bulk_chunked"]), ">=", 0.8),
    ("bulk GET (chunked) proxy CPU s/GiB", s["cpu_chunked"], "<=", 1.0),
    ("CONNECT bulk / direct", ratio(s["bulk_connect"], d["bulk_connect"]), ">=", 0.9),
    ("keep-alive req/s / direct", ratio(s["ka_rps"], d["ka_rps"]), ">=", 0.6),
    ("keep-alive req/s / squid", ratio(s["ka_rps"], q["ka_rps"]), ">=", 3.0),
    ("keep-alive p99 / squid", ratio(s["ka_p99"], q["ka_p99"]), "<=", 0.5),
    ("new connection req/s / direct", ratio(s["nc_rps"], d["nc_rps"]), ">=", 0.6),
    ("new connection p99 / squid", ratio(s["nc_p99"], q["nc_p99"]), "<=", 1.0),
]
dns = None
if dns_json and os.path.exists(dns_json):
    dns = json.load(open(dns_json))
    for mix, r in dns["results"].items():
        goals.append((f"DNS {mix} q/s / dnsmasq", r["ratio_qps_dnsmasq"], ">=", 1.0))
        goals.append((f"DNS {mix} CPU/query / dnsmasq", r["ratio_cpu_dnsmasq"], "<=", 1.0))
        goals.append((f"DNS {mix} q/s with cache / unbound", r["ratio_qps_cache_unbound"], ">=", 1.0))
print()
print("goals (issue 16):")
glist = []
for what, v, op, target in goals:
    met = None if v is None else (v >= target if op == ">=" else v <= target)
    glist.append({"goal": what, "value": v, "target": f"{op} {target}", "met": met})
    print(f"  {what:44} {fmt(v) if v is None or v >= 100 else v:>8}  [{op} {target}]  {'met' if met else 'NOT met' if met is not None else 'n/a'}")
print(f"  sluice wrote $audit_lines audit lines; failures or non-2xx: {bad or 'none'}")
doc = {"date": "$(date -u +%FT%TZ)", "kernel": os.uname().release, "cpus": os.cpu_count(), "origin": "$origin", "seconds": $secs,
       "rounds": $rounds, "connections": $conns, "bulk_mib": ${BENCH_BULK_MIB:-1024},
       "load_before": "$load_before", "load_after": "$load_after", "audit_lines": $audit_lines, "failures": bad,
       "results": res, "samples": {names[k.rsplit("_", 1)[1]] + ":" + k.rsplit("_", 1)[0]: v for k, v in S.items()},
       "goals": glist}
if dns:
    doc["dns"] = dns
with open(out, "w") as f:
    json.dump(doc, f, indent=1)
print(f"JSON: {out}")
PY
