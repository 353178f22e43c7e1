#!/usr/bin/env bash
# bench-dns.sh [BUILD_DIR]: sluice's DNS proxy against dnsmasq and unbound doing the same allowlist work, in
# one run inside a private lab (tests/lib/lab.sh: its own network, mount and pid namespaces; no packet leaves
# them). Needs root and the bench packages (tools/deps.sh --bench). A benchmark, not a test: not in the suite.
#
# Every contender listens on the session's gateway and relays allowed names to the same upstream (a dnsmasq
# in the fake internet, authoritative for .test, no logging); denied names are answered locally:
#   sluice   sluice-proxy, the policy allows allowed.test, registry.test, bench.test and their subdomains;
#            every query is decided and written to the audit log (a tmpfs in the lab); no cache
#   dnsmasq  the allowlisting forwarder of issue 16: server=/allowed.test/UPSTREAM (one per allowed domain)
#            plus address=/#/ (everything else NXDOMAIN, answered locally), cache-size=0, no logging
#   sluice+cache  a second sluice-proxy, the same but with its DNS cache (limits.dns_cache_entries 10000)
#   unbound  with its cache: local-zone "." refuse, the allowed domains transparent and forwarded to the
#            upstream; 1 thread (as the others); warmed up, so it answers from its cache
# Query mixes (dnsperf -c 8 -q 64, A and AAAA, 12 allowed and 12 denied names): mixed (allowed and denied
# alternating), allowed-only, denied-only.
#
# For each contender and mix: queries per second and the server's CPU per query (utime+stime of its process
# from /proc/PID/stat over the run, divided by the queries answered). The machine is shared, so CPU per query
# is the steadier figure. Medians of BENCH_ROUNDS (default 3) rounds whose order rotates, BENCH_SECONDS (default
# 8) per run. Prints a table and ratios; writes JSON to BENCH_JSON (default BUILD_DIR/bench-dns.json).
# The audit log is written to BENCH_AUDIT_DIR (default BUILD_DIR: a disk, as /var/log/sluice would be, not the
# lab's tmpfs) and removed at the end. BENCH_CLIENTS sets dnsperf's -c (default 8). BENCH_PERF=DIR records a
# perf profile (perf record -g) of the sluice-proxy processes and of unbound during their runs of the first
# round into DIR/perf-WHO-MIX.data (WHO: sluice, sluice_cache, base_cache, unbound).
# BENCH_STRACE=DIR counts their system calls the same way (strace -c, DIR/strace-WHO-MIX.txt; strace slows
# the process down, so that round's figures are not comparable: use it with BENCH_ROUNDS=1 on its own).
# A/B: BENCH_BASELINE=PATH adds base_cache, another sluice-proxy binary (say main's build, copied aside) with the
# same cache config, alternating with the others, so two builds are compared in the same run.
# BENCH_CONTENDERS (default "sluice sluice_cache dnsmasq unbound", plus base_cache) and BENCH_MIXES (default
# "mixed allowed denied") select what is measured. Each run also reports the server's run-queue delay per query
# (/proc/PID/schedstat: time it was runnable but another task had the CPU), which is how a rate can fall while
# the CPU per query stays the same.
# BENCH_SYSCALLS=1: each run of a sluice-proxy or unbound also counts the server's system calls (perf stat on
# the syscall tracepoints: cheap, unlike strace) and prints them per query, with its context switches (the
# client it wakes preempting it): how many queries each epoll_wait, recvmmsg, sendmmsg and audit write carried.
# BENCH_CALLGRIND=DIR: the cached sluice-proxy processes (sluice_cache, and base_cache with BENCH_BASELINE) run
# under callgrind (their event loop only), at valgrind's pace (their rates mean nothing), and the instructions
# each spent per query (its audit records, warm-up included) are printed, in all and without libcrypto (SHA-256
# of the audit chain, which under valgrind takes a path without the CPU's SHA instructions): user-space work
# per query that the machine's load does not move. Use it with BENCH_CONTENDERS="sluice_cache" (and
# base_cache) and one mix; DIR/callgrind-{sluice_cache,base_cache}.out for callgrind_annotate.
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
export SLUICE_SOURCE_DIR=$src SLUICE_BUILD_DIR=${1:-${SLUICE_BUILD_DIR:-$src/build}}
SLUICE_BUILD_DIR=$(cd "$SLUICE_BUILD_DIR" && pwd) || exit 2
BENCH_JSON=${BENCH_JSON:-$SLUICE_BUILD_DIR/bench-dns.json}
export BENCH_JSON
. "$src/tests/lib/tap.sh"
. "$src/tests/lib/lab.sh"
. "$src/tests/lib/proxy-lab.sh"
lab_enter "$@"
_lab_need dnsperf dnsmasq unbound
secs=${BENCH_SECONDS:-8}
rounds=${BENCH_ROUNDS:-3}
UPSTREAM_DNS=198.18.0.54
DOMAINS="allowed.test registry.test bench.test"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

lab_internet_up >/dev/null
lab_session s1 >/dev/null
read -r _ GW _ < <(lab_session_info s1)

# ---- the upstream: authoritative for .test, an A and an AAAA for every allowed name, no query log
ip -n inet addr add "$UPSTREAM_DNS/24" dev eth0
allowed_names=(allowed.test www.allowed.test cdn.allowed.test api.allowed.test registry.test
	files.registry.test bench.test a.b.bench.test)
denied_names=(evil.test c2.evil.test tracker.example.com exfil.attacker.example 6c6f67696e.leak.example
	ads.example.net telemetry.vendor.example update.example.org)
for i in "${!allowed_names[@]}"; do
	echo "198.18.2.$((i + 1)) ${allowed_names[$i]}"
	echo "2001:db8:1::2:$((i + 1)) ${allowed_names[$i]}"
done >"$LAB_DIR/upstream-hosts"
printf '%s\n' no-resolv no-hosts no-poll "addn-hosts=$LAB_DIR/upstream-hosts" "listen-address=$UPSTREAM_DNS" \
	bind-interfaces local=/test/ local-ttl=300 cache-size=10000 dns-forward-max=10000 \
	"pid-file=$LAB_DIR/state/upstream-dns.pid" user=root group=root >"$LAB_DIR/upstream-dns.conf"
lab_bg upstream-dns -n inet dnsmasq --keep-in-foreground --conf-file="$LAB_DIR/upstream-dns.conf"

# ---- the contenders, on the session's gateway
rules=
for d in $DOMAINS; do rules+="\"$d\", \"*.$d\", "; done
PROXY_AUDIT=${BENCH_AUDIT_DIR:-$SLUICE_BUILD_DIR}/bench-dns-audit.$$.log
lab_defer "rm -f '$PROXY_AUDIT'"
proxy_start s1 "{\"allow\": [${rules%, }]}"
proxy_use_resolver s1 "$UPSTREAM_DNS:53"
sed -e 's/:53"/:5355"/g' -e "s/$UPSTREAM_DNS:5355/$UPSTREAM_DNS:53/" -e 's/:3128"/:3131"/g' -e 's/"limits": {}/"limits": {"dns_cache_entries": 10000}/' \
	-e "s|\"audit_log\": \"[^\"]*\"|\"audit_log\": \"$PROXY_AUDIT.cache\"|" "$LAB_DIR/proxy/config-s1.json" \
	>"$LAB_DIR/proxy/config-cache.json"
lab_defer "rm -f '$PROXY_AUDIT.cache'"
grep -q dns_cache_entries "$LAB_DIR/proxy/config-cache.json" || lab_bail "no cache in the second proxy's config"
# callgrind_of WHO: the command prefix that runs a sluice-proxy under callgrind (BENCH_CALLGRIND), or nothing
callgrind_of() {
	[ -n "${BENCH_CALLGRIND:-}" ] || return 0
	# (the proxy drops root before it writes its profile at exit: the file is made writable first)
	install -m 0666 /dev/null "$BENCH_CALLGRIND/callgrind-$1.out"
	echo valgrind --tool=callgrind --toggle-collect=event_base_loop \
		"--callgrind-out-file=$BENCH_CALLGRIND/callgrind-$1.out"
}
[ -z "${BENCH_CALLGRIND:-}" ] || mkdir -p "$BENCH_CALLGRIND" || lab_bail "cannot make $BENCH_CALLGRIND"
# shellcheck disable=SC2046
lab_bg proxy-cache $(callgrind_of sluice_cache) "$PROXY_BIN" --config "$LAB_DIR/proxy/config-cache.json"
ports="53 5355 5353 5354"
if [ -n "${BENCH_BASELINE:-}" ]; then
	[ -x "$BENCH_BASELINE" ] || lab_bail "BENCH_BASELINE=$BENCH_BASELINE is not an executable"
	sed -e 's/:5355"/:5356"/g' -e 's/:3131"/:3132"/g' -e "s|$PROXY_AUDIT.cache|$PROXY_AUDIT.base|" \
		"$LAB_DIR/proxy/config-cache.json" >"$LAB_DIR/proxy/config-base.json"
	lab_defer "rm -f '$PROXY_AUDIT.base'"
	# shellcheck disable=SC2046
	lab_bg proxy-base $(callgrind_of base_cache) "$BENCH_BASELINE" --config "$LAB_DIR/proxy/config-base.json"
	ports+=" 5356"
fi

{
	printf '%s\n' no-resolv no-hosts no-poll "listen-address=$GW" bind-interfaces port=5353 cache-size=0 \
		dns-forward-max=10000 "pid-file=$LAB_DIR/state/dm.pid" user=root group=root
	for d in $DOMAINS; do echo "server=/$d/$UPSTREAM_DNS"; done
	echo "address=/#/"
} >"$LAB_DIR/dnsmasq.conf"
lab_bg dnsmasq-fwd dnsmasq --keep-in-foreground --conf-file="$LAB_DIR/dnsmasq.conf"

{
	printf '%s\n' "server:" "  interface: $GW" "  port: 5354" "  num-threads: 1" "  do-daemonize: no" \
		"  chroot: \"\"" "  username: \"\"" "  directory: \"$LAB_DIR\"" "  pidfile: \"$LAB_DIR/state/unbound.pid\"" \
		"  use-syslog: no" "  logfile: \"\"" "  verbosity: 0" "  access-control: 0.0.0.0/0 allow" \
		"  module-config: \"iterator\"" "  do-not-query-localhost: no" "  so-reuseport: no" \
		"  local-zone: \"test.\" nodefault" "  local-zone: \".\" refuse"
	for d in $DOMAINS; do echo "  local-zone: \"$d.\" transparent"; done
	for d in $DOMAINS; do printf '%s\n' "forward-zone:" "  name: \"$d.\"" "  forward-addr: $UPSTREAM_DNS"; done
	printf '%s\n' "remote-control:" "  control-enable: no"
} >"$LAB_DIR/unbound.conf"
lab_bg unbound unbound -d -c "$LAB_DIR/unbound.conf"

udp_up() {
	lab_exec s1 "$LAB_PYTHON" -c '
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(1)
s.sendto(bytes.fromhex("4242010000010000000000000" "7616c6c6f77656404746573740000010001"), (sys.argv[1], int(sys.argv[2])))
sys.exit(0 if s.recv(512)[:2] == b"\x42\x42" else 1)' "$GW" "$1" 2>/dev/null
}
for p in $ports; do
	for _ in $(seq $([ -n "${BENCH_CALLGRIND:-}" ] && echo 600 || echo 50)); do udp_up "$p" && break; sleep 0.1; done
	udp_up "$p" || lab_bail "no DNS answer on $GW:$p: $(tail -n 3 "$LAB_DIR"/log/*.log)"
done

# ---- query files
: >"$LAB_DIR/q-allowed" && : >"$LAB_DIR/q-denied" && : >"$LAB_DIR/q-mixed"
for t in A AAAA; do
	for n in "${allowed_names[@]}"; do echo "$n $t"; done >>"$LAB_DIR/q-allowed"
	for n in "${denied_names[@]}"; do echo "$n $t"; done >>"$LAB_DIR/q-denied"
done
paste -d '\n' "$LAB_DIR/q-allowed" "$LAB_DIR/q-denied" >"$LAB_DIR/q-mixed"

declare -A PORT=([sluice]=53 [sluice_cache]=5355 [dnsmasq]=5353 [unbound]=5354 [base_cache]=5356)
declare -A PIDNAME=([sluice]=proxy [sluice_cache]=proxy-cache [dnsmasq]=dnsmasq-fwd [unbound]=unbound
	[base_cache]=proxy-base)
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
run_delay() { awk '{ print $2 }' "/proc/$1/schedstat"; } # ns runnable but not running
# run WHO MIX: prints "qps cpu_us_per_query completed lost run_delay_us_per_query"
run() {
	local who=$1 mix=$2 pid t0 t1 d0 d1 out perfpid=
	pid=$(lab_pid "${PIDNAME[$who]}")
	if [ -n "${BENCH_PERF:-}" ] && [[ $who == sluice* || $who == base* || $who == unbound ]] && [ "${round:-0}" = 1 ]; then
		perf record -q -F 2999 -g -p "$pid" -o "$BENCH_PERF/perf-$who-$mix.data" -- sleep "$secs" >/dev/null 2>&1 &
		perfpid=$!
	elif [ -n "${BENCH_STRACE:-}" ] && [[ $who == sluice* || $who == base* ]] && [ "${round:-0}" = 1 ]; then
		timeout -s INT "$secs" strace -c -q -p "$pid" -o "$BENCH_STRACE/strace-$who-$mix.txt" 2>/dev/null &
		perfpid=$!
	fi
	local statpid=
	if [ -n "${BENCH_SYSCALLS:-}" ] && [[ $who == sluice* || $who == base* || $who == unbound ]]; then
		perf stat -x, -o "$LAB_DIR/syscalls-$who-$mix" -p "$pid" -e context-switches,raw_syscalls:sys_enter \
			-e syscalls:sys_enter_epoll_wait,syscalls:sys_enter_recvmmsg,syscalls:sys_enter_sendmmsg \
			-e syscalls:sys_enter_recvfrom,syscalls:sys_enter_recvmsg,syscalls:sys_enter_sendto \
			-e syscalls:sys_enter_sendmsg,syscalls:sys_enter_write -- sleep "$secs" 2>/dev/null &
		statpid=$!
	fi
	t0=$(cpu_ticks "$pid") d0=$(run_delay "$pid")
	out=$(lab_exec s1 dnsperf -s "$GW" -p "${PORT[$who]}" -d "$LAB_DIR/q-$mix" -l "$secs" -c "${BENCH_CLIENTS:-8}" -q 64 -T 1 -t 2 2>&1)
	t1=$(cpu_ticks "$pid") d1=$(run_delay "$pid")
	[ -z "$perfpid" ] || wait "$perfpid"
	if [ -n "$statpid" ]; then
		wait "$statpid"
		awk -F, -v who="$who" -v mix="$mix" -v done="$(awk '/Queries completed:/ { print $3 }' <<<"$out")" '
			$3 != "" && $1 ~ /^[0-9.]+$/ { e = $3; sub(/^(syscalls:sys_enter_|raw_syscalls:sys_enter)/, "", e)
				if (e == "") e = "all"; if ($1 > 0) s = s sprintf(" %s %.3f", e, $1 / done) }
			END { if (done > 0) printf "# %s %s: per query:%s\n", who, mix, s }' "$LAB_DIR/syscalls-$who-$mix" >&2
	fi
	[ -n "${BENCH_VERBOSE:-}" ] && grep -E 'Queries|Response codes' <<<"$out" | sed "s/^/# $who $mix: /" >&2
	awk -v ticks=$((t1 - t0)) -v delay=$((d1 - d0)) -v hz="$(getconf CLK_TCK)" '
		/Queries completed:/ { done = $3 }
		/Queries lost:/ { lost = $3 }
		/Queries per second:/ { qps = $4 }
		END { printf "%.0f %.2f %d %d %.2f\n", qps, done ? ticks / hz * 1e6 / done : 0, done, lost,
			done ? delay / 1e3 / done : 0 }' <<<"$out"
}
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" -v none="${3:-n/a}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else printf "%s", none }'; }

echo "# warming up (and filling the caches)"
# shellcheck disable=SC2206
whos=(${BENCH_CONTENDERS:-sluice sluice_cache dnsmasq unbound})
[ -z "${BENCH_BASELINE:-}" ] || [[ " ${whos[*]} " == *" base_cache "* ]] || whos+=(base_cache)
for who in "${whos[@]}"; do [ -n "${PORT[$who]:-}" ] || lab_bail "unknown contender '$who'"; done
for who in "${whos[@]}"; do secs=2 run "$who" mixed >/dev/null; done
# shellcheck disable=SC2206
mixes=(${BENCH_MIXES:-mixed allowed denied})
declare -A S
for ((round = 1; round <= rounds; round++)); do
	for mix in "${mixes[@]}"; do
		for ((k = 0; k < ${#whos[@]}; k++)); do
			who=${whos[(k + round) % ${#whos[@]}]}
			read -r qps cpu done lost delay < <(run "$who" "$mix")
			echo "# round $round: $who $mix: $qps q/s, $cpu us CPU/query, $done answered, $lost lost, $delay us run-queue delay/query"
			S[qps_${who}_$mix]+=" $qps" S[cpu_${who}_$mix]+=" $cpu" S[lost_${who}_$mix]+=" $lost"
			S[delay_${who}_$mix]+=" $delay"
		done
	done
done
declare -A R
for key in "${!S[@]}"; do
	# shellcheck disable=SC2086
	R[$key]=$(median ${S[$key]})
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
if [ -n "${BENCH_CALLGRIND:-}" ]; then
	for who in sluice_cache base_cache; do
		[ -n "$(lab_pid "${PIDNAME[$who]}" 2>/dev/null)" ] || continue
		lab_stop "${PIDNAME[$who]}"
		log=$PROXY_AUDIT.cache
		[ "$who" = sluice_cache ] || log=$PROXY_AUDIT.base
		n=$(wc -l <"$log")
		callgrind_annotate "$BENCH_CALLGRIND/callgrind-$who.out" 2>/dev/null | awk -v x="$who" -v n="$n" '
			/PROGRAM TOTALS/ { gsub(",", "", $1); t = $1 }
			/libcrypto/ && $1 ~ /^[0-9,]+$/ { gsub(",", "", $1); c += $1 }
			END { if (n > 0) printf "callgrind %s: %d queries, %.0f instructions/query, %.0f without libcrypto\n", x, n, t / n, (t - c) / n }'
	done
fi
audit_lines=$(($(wc -l <"$PROXY_AUDIT") + $(wc -l <"$PROXY_AUDIT.cache")))
[ -z "${BENCH_BASELINE:-}" ] || audit_lines=$((audit_lines + $(wc -l <"$PROXY_AUDIT.base")))

echo
echo "DNS benchmark ($(nproc) CPUs, dnsperf -c ${BENCH_CLIENTS:-8} -q 64, ${secs} s per run, median of $rounds rounds)"
echo "load average before: $load_before, after: $load_after"
printf '%-8s %-10s %9s %9s %13s %9s %11s  %s\n' mix "" sluice dnsmasq sluice+cache unbound base+cache \
	"ratios sluice/dnsmasq, sluice+cache/unbound, sluice+cache/base+cache"
for mix in "${mixes[@]}"; do
	for m in qps cpu delay; do
		printf '%-8s %-10s %9s %9s %13s %9s %11s  %s %s %s\n' "$([ $m = qps ] && echo "$mix")" \
			"$(case $m in qps) echo q/s ;; cpu) echo "us CPU/q" ;; *) echo "us wait/q" ;; esac)" \
			"${R[${m}_sluice_$mix]:--}" "${R[${m}_dnsmasq_$mix]:--}" "${R[${m}_sluice_cache_$mix]:--}" \
			"${R[${m}_unbound_$mix]:--}" "${R[${m}_base_cache_$mix]:--}" \
			"$(ratio "${R[${m}_sluice_$mix]:-0}" "${R[${m}_dnsmasq_$mix]:-0}")" \
			"$(ratio "${R[${m}_sluice_cache_$mix]:-0}" "${R[${m}_unbound_$mix]:-0}")" \
			"$(ratio "${R[${m}_sluice_cache_$mix]:-0}" "${R[${m}_base_cache_$mix]:-0}")"
	done
done
echo "us wait/q: the server's run-queue delay per query (runnable, but another task had the CPU)"
echo "goals (issue 16): sluice/dnsmasq q/s >= 1 and CPU/q <= 1 on each mix; sluice+cache/unbound q/s >= 1"
echo "sluice wrote $audit_lines audit lines"

{
	printf '{"date": "%s", "kernel": "%s", "cpus": %d, "seconds": %d, "rounds": %d,\n' "$(date -u +%FT%TZ)" \
		"$(uname -r)" "$(nproc)" "$secs" "$rounds"
	printf ' "load_before": "%s", "load_after": "%s", "audit_lines": %d, "results": {' "$load_before" "$load_after" \
		"$audit_lines"
	sep=
	for mix in "${mixes[@]}"; do
		printf '%s\n  "%s": {' "$sep" "$mix"
		sep2=
		for who in "${whos[@]}"; do
			printf '%s"%s": {"qps": %s, "cpu_us_per_query": %s, "run_queue_delay_us_per_query": %s, "lost": %s, "qps_samples": [%s], "cpu_samples": [%s]}' \
				"$sep2" "$who" "${R[qps_${who}_$mix]:-null}" "${R[cpu_${who}_$mix]:-null}" \
				"${R[delay_${who}_$mix]:-null}" "${R[lost_${who}_$mix]:-null}" \
				"$(echo ${S[qps_${who}_$mix]} | tr ' ' ',')" "$(echo ${S[cpu_${who}_$mix]} | tr ' ' ',')"
			sep2=", "
		done
		printf ', "ratio_qps_dnsmasq": %s, "ratio_cpu_dnsmasq": %s, "ratio_qps_cache_unbound": %s, "ratio_cpu_cache_unbound": %s, "ratio_cpu_cache_base": %s}' \
			"$(ratio "${R[qps_sluice_$mix]:-0}" "${R[qps_dnsmasq_$mix]:-0}" null)" \
			"$(ratio "${R[cpu_sluice_$mix]:-0}" "${R[cpu_dnsmasq_$mix]:-0}" null)" \
			"$(ratio "${R[qps_sluice_cache_$mix]:-0}" "${R[qps_unbound_$mix]:-0}" null)" \
			"$(ratio "${R[cpu_sluice_cache_$mix]:-0}" "${R[cpu_unbound_$mix]:-0}" null)" \
			"$(ratio "${R[cpu_sluice_cache_$mix]:-0}" "${R[cpu_base_cache_$mix]:-0}" null)"
		sep=,
	done
	printf '\n}}\n'
} >"$BENCH_JSON"
echo "JSON: $BENCH_JSON"
