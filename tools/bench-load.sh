#!/usr/bin/env bash
# bench-load.sh [BUILD_DIR]: the proxy engine under load, in a private lab (tests/lib/lab.sh: its own network,
# mount and pid namespaces; no packet leaves them). Needs root. Not part of the test suite (its small version
# is tests/integration/reliability.sh); tools/reliability.sh runs it. Prints a table of figures and exits
# non-zero if a check failed. Bounded: each phase has a count and a time limit.
#
#   tunnels   LOAD_TUNNELS (10000) concurrent CONNECT tunnels across LOAD_SESSIONS (100) sessions, each
#             echo-checked when set up and again after being held; the engine's RSS per idle tunnel
#             (VmRSS of /proc/PID/status, held minus before, divided by the count)
#   aborts    LOAD_ABORTS (10000) connections reset at four stages; the engine's descriptors
#             (/proc/PID/fd) before and after
#   latency   session A: LOAD_LAT_N (300) sequential CONNECT + echo round trips, idle, then while session B
#             runs a slowloris (400 held half-heads) and a connection flood (32 workers); p50/p99 in ms;
#             the target is loaded p99 <= 2 x idle p99 (reported, not enforced: the machine's other load
#             decides it as much as the engine)
#   audit     LOAD_CLIENTS (200) concurrent clients x 10 requests across the sessions: N decisions made,
#             N audit lines written, every line whole, the hash chain intact
#
# The engine needs two descriptors per tunnel: if the hard RLIMIT_NOFILE (which only a process with
# CAP_SYS_RESOURCE can raise) is too low for LOAD_TUNNELS, the run uses the largest count that fits and says so.
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
export SLUICE_SOURCE_DIR=$src SLUICE_BUILD_DIR=${1:-${SLUICE_BUILD_DIR:-$src/build}}
SLUICE_BUILD_DIR=$(cd "$SLUICE_BUILD_DIR" && pwd) || exit 2
. "$src/tests/lib/tap.sh"
. "$src/tests/lib/lab.sh"
. "$src/tests/lib/proxy-lab.sh"
. "$src/tests/lib/load-lab.sh"
lab_enter "$@"
# Everything below runs inside the lab's own namespaces.
ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)"
want=${LOAD_TUNNELS:-10000} nsess=${LOAD_SESSIONS:-100} naborts=${LOAD_ABORTS:-10000}
latn=${LOAD_LAT_N:-300} clients=${LOAD_CLIENTS:-200}
fail=0
declare -A F # figures
note() { echo "# $*" >&2; }
verdict() { # verdict NAME OK?: records a check
	if [ "$2" = 1 ]; then F[$1]=pass; else F[$1]=FAIL; fail=1; fi
}

lab_internet_up >/dev/null
t0=$(_lab_now_ms)
load_up "$nsess"
out=$(load_gen tunnels "$LOAD_SESSIONS" 100 $LOAD_TARGETS </dev/null)
[ "$(json_get "$(head -n 1 <<<"$out")" ok)" = 100 ] || lab_bail "warm-up tunnels failed: $out"
base_fds=$(load_wait_fds 0 1)
base_rss=$(load_rss_kb)
limit=$(ulimit -Hn)
fit=$(((limit - base_fds - 64) / 2))
n=$want
if [ "$fit" -lt "$want" ]; then
	n=$fit
	F[tunnels_note]="capped at $n: RLIMIT_NOFILE hard limit $limit (the engine needs 2 per tunnel)"
	note "${F[tunnels_note]}"
fi

# ---- tunnels
note "tunnels: $n across $nsess sessions"
coproc TUN { load_gen tunnels "$LOAD_SESSIONS" "$n" $LOAD_TARGETS; }
tun_pid=$TUN_PID
exec {tun_out}<&"${TUN[0]}" {tun_in}>&"${TUN[1]}" # the coproc's variables go when it ends
read -r -t 600 first <&"$tun_out" || first='{}'
F[tunnels_ok]=$(json_get "$first" ok) F[tunnels_setup_s]=$(json_get "$first" setup_s)
F[tunnels_errors]=$(json_get "$first" errors)
sleep 1
held_rss=$(load_rss_kb) held_fds=$(load_fds)
echo go >&"$tun_in"
read -r -t 600 second <&"$tun_out" || second='{}'
wait "$tun_pid" 2>/dev/null
F[tunnels_alive]=$(json_get "$second" alive)
F[rss_base_kb]=$base_rss F[rss_held_kb]=$held_rss F[fds_held]=$held_fds
F[rss_per_tunnel_kb]=$(awk -v a="$held_rss" -v b="$base_rss" -v n="${F[tunnels_ok]:-0}" 'BEGIN { if (n > 0) printf "%.1f", (a - b) / n; else print "n/a" }')
F[fds_after_tunnels]=$(load_wait_fds "$base_fds" 30)
F[rss_after_tunnels_kb]=$(load_rss_kb)
verdict tunnels "$([ "${F[tunnels_ok]}" = "$n" ] && [ "${F[tunnels_alive]}" = "$n" ] && echo 1)"

# ---- aborted connections
note "aborts: $naborts"
out=$(load_gen abort "$LOAD_SESSIONS" "$naborts" allowed.test:7001 </dev/null)
F[aborted]=$(json_get "$out" aborted) F[abort_s]=$(json_get "$out" seconds)
F[fds_base]=$base_fds
F[fds_after_aborts]=$(load_wait_fds "$base_fds" 30)
verdict fds "$([ "${F[aborted]}" = "$naborts" ] && [ "${F[fds_after_aborts]}" = "$base_fds" ] &&
	[ "${F[fds_after_tunnels]}" = "$base_fds" ] && echo 1)"

# ---- latency of session A, idle and while session B floods
# On 2+ CPUs (and LOAD_PIN not 0) the engine, session A's client and the echo server share CPU 0 and the
# flood's generator gets CPU 1: what is measured is what B's load through the engine does to A, not the
# generator's fight for the same CPU (a python flood saturates a core of its own).
pin_a=() pin_b=()
if [ "${LOAD_PIN:-1}" != 0 ] && [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
	taskset -a -p -c 0 "$LOAD_PID" >/dev/null && taskset -a -p -c 0 "$(lab_pid echo7000)" >/dev/null &&
		pin_a=(taskset -c 0) pin_b=(taskset -c 1) F[pinning]="engine, A's client, echo server on CPU 0; B's flood generator on CPU 1"
fi
lat_gen() { ip netns exec load "${pin_a[@]}" "$LAB_PYTHON" "$LAB_LIB_DIR/loadgen.py" "$@"; }
note "latency: $latn requests, idle"
idle=$(lat_gen latency "$LOAD_S1" "$latn" allowed.test:7003 </dev/null)
F[lat_idle_p50]=$(json_get "$idle" p50_ms) F[lat_idle_p99]=$(json_get "$idle" p99_ms)
note "latency: $latn requests while session B floods"
coproc FLOOD { ip netns exec load "${pin_b[@]}" "$LAB_PYTHON" "$LAB_LIB_DIR/loadgen.py" flood "$LOAD_S2" 600 400 32; }
flood_pid=$FLOOD_PID
exec {flood_out}<&"${FLOOD[0]}" {flood_in}>&"${FLOOD[1]}"
sleep 3
busy=$(lat_gen latency "$LOAD_S1" "$latn" allowed.test:7003 </dev/null)
echo stop >&"$flood_in"
read -r -t 60 fl <&"$flood_out" || fl='{}'
wait "$flood_pid" 2>/dev/null
F[flood]=$fl
F[lat_flood_p50]=$(json_get "$busy" p50_ms) F[lat_flood_p99]=$(json_get "$busy" p99_ms)
F[lat_flood_n]=$(json_get "$busy" n) F[lat_idle_n]=$(json_get "$idle" n)
F[lat_ratio]=$(awk -v a="${F[lat_flood_p99]:-0}" -v b="${F[lat_idle_p99]:-0}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')
verdict latency_served "$([ "${F[lat_flood_n]}" = "$latn" ] && [ "${F[lat_idle_n]}" = "$latn" ] && echo 1)"
F[lat_within_2x]=$(awk -v r="${F[lat_ratio]}" 'BEGIN { print (r != "n/a" && r <= 2) ? "yes" : "NO" }')
F[fds_after_flood]=$(load_wait_fds "$base_fds" 30)

# ---- no audit record lost
note "audit: $clients clients x 10 requests"
sleep 1
before=$(load_audit_lines)
out=$(load_gen decisions "$LOAD_SESSIONS" "$clients" 10 allowed.test:7002 </dev/null)
F[decisions]=$(json_get "$out" decisions) F[decisions_other]=$(json_get "$out" other)
load_wait_lines $((before + F[decisions])) 20 >/dev/null
sleep 1
F[audit_lines]=$(($(load_audit_lines) - before))
whole=0
"$LAB_PYTHON" -c '
import json, sys
for line in open(sys.argv[1]): json.loads(line)' "$LOAD_AUDIT" && whole=1
chain=$("$SLUICE_BUILD_DIR/tools/sluicectl/sluicectl" log verify "$LOAD_AUDIT" 2>&1 | tail -n 1)
F[audit_chain]=$chain
verdict audit "$([ "${F[decisions]}" = $((clients * 10)) ] && [ "${F[audit_lines]}" = "${F[decisions]}" ] &&
	[ "$whole" = 1 ] && [[ $chain == *"chain intact"* ]] && echo 1)"

lab_stop proxy
verdict clean_exit "$([ "$LAB_STOP_STATUS" = 0 ] && echo 1)"
F[total_s]=$((($(_lab_now_ms) - t0) / 1000))

row() { printf '  %-58s %s\n' "$1" "$2"; }
echo
echo "sluice-proxy under load ($(nproc) CPUs, kernel $(uname -r), $(date -u +%Y-%m-%dT%H:%MZ), ${F[total_s]} s)"
row "concurrent CONNECT tunnels set up / asked" "${F[tunnels_ok]} / $n across $nsess sessions in ${F[tunnels_setup_s]} s [${F[tunnels]}]"
[ -n "${F[tunnels_note]:-}" ] && row "" "(${F[tunnels_note]}; asked $want)"
[ "${F[tunnels_errors]}" = "{}" ] || row "tunnel errors" "${F[tunnels_errors]}"
row "tunnels still echoing after being held" "${F[tunnels_alive]}"
row "engine RSS: at rest / with the tunnels / after" "${F[rss_base_kb]} / ${F[rss_held_kb]} / ${F[rss_after_tunnels_kb]} KiB"
row "engine RSS per idle tunnel" "${F[rss_per_tunnel_kb]} KiB"
row "engine descriptors: at rest / with the tunnels / after" "${F[fds_base]} / ${F[fds_held]} / ${F[fds_after_tunnels]}"
row "aborted connections (4 stages) / descriptors after" "${F[aborted]} in ${F[abort_s]} s / ${F[fds_after_aborts]} (baseline ${F[fds_base]}) [${F[fds]}]"
row "session A latency idle p50 / p99" "${F[lat_idle_p50]} / ${F[lat_idle_p99]} ms (${F[lat_idle_n]} requests)"
row "session A latency during B's flood p50 / p99" "${F[lat_flood_p50]} / ${F[lat_flood_p99]} ms (${F[lat_flood_n]} requests) [${F[latency_served]}]"
row "p99 flood / idle (target <= 2)" "${F[lat_ratio]} (within 2x: ${F[lat_within_2x]})"
row "CPU pinning for the latency runs" "${F[pinning]:-none}"
row "session B's flood" "${F[flood]}"
row "descriptors after the flood" "${F[fds_after_flood]}"
row "decisions made / audit lines written" "${F[decisions]} / ${F[audit_lines]} (${F[decisions_other]} errors) [${F[audit]}]"
row "audit log check" "${F[audit_chain]}"
row "engine exit after the run" "status $LAB_STOP_STATUS [${F[clean_exit]}]"
exit "$fail"
