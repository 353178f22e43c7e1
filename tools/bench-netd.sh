#!/usr/bin/env bash
# Benchmark of sluiced session setup/teardown (not part of the test suite). Runs inside a lab (a private
# network+mount+pid namespace: nothing touches the machine's own network). For 1, 100 and 1000 live sessions
# it opens SAMPLES more sessions one at a time and ends each (END is answered after teardown), RUNS times,
# and in the same run times the command-line baseline once per level: `ip netns add` + `ip link add veth ...
# netns` + `nft add table` (and their deletion). Prints, per level, the median over the runs of each run's
# p50 and p99 (nearest rank) in ms, the CPU time sluiced and its engine spent per sample (setup and
# teardown; from /proc: wall time is noisy on a shared machine, CPU time less so) and the load average when the level
# began; writes the same as JSON to JSON_OUT (default BUILD_DIR/bench-netd.json).
#   usage: tools/bench-netd.sh [BUILD_DIR] [SAMPLES]     (env: RUNS=3, LIVES="1 100 1000", JSON_OUT=FILE,
#          PERF_OUT=FILE: perf record -g of sluiced and its engine per level (PERF_EVENTS=LIST: those events,
#          e.g. sched:sched_switch for where it waits); STRACE_OUT=FILE: strace -f -T)
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
export SLUICE_SOURCE_DIR=${SLUICE_SOURCE_DIR:-$src}
export SLUICE_BUILD_DIR=${SLUICE_BUILD_DIR:-$(cd "${1:-$src/build}" && pwd)}
SAMPLES=${2:-${SAMPLES:-100}}
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/lab.sh"
lab_enter "$@"

CLIENT=$SLUICE_BUILD_DIR/tests/integration/netd-testclient
export SLUICE_RUN_DIR=/run/sluice
POLICY=$LAB_DIR/tmp/policy.json
echo '{ "allow": ["registry.test"] }' >"$POLICY"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

lab_internet_up >/dev/null # the engine needs its upstream resolver
lab_bg sluiced "$SLUICE_BUILD_DIR/netd/sluiced" --run-dir /run/sluice --audit-log "$LAB_DIR/audit.log" \
	--pool4 100.64.0.0/16 --pool6 2001:db8:100::/64 --upstream-dns "$LAB_DNS"
for i in $(seq 200); do "$CLIENT" list >/dev/null 2>&1 && break; sleep 0.05; done

max=$((1000 + SAMPLES))
mkdir -p "$LAB_DIR/ns"
t0=$EPOCHREALTIME
for i in $(seq 0 $((max - 1))); do echo "netns add n$i"; done | ip -batch - || lab_bail "creating namespaces"
for i in $(seq 0 $((max - 1))); do ln -s "/run/netns/n$i" "$LAB_DIR/ns/n$i"; done
echo "# created $max namespaces for the sessions in $(awk "BEGIN{printf \"%.1f\", $EPOCHREALTIME - $t0}") s"

# stats FILE FIELD: median and p99 (nearest rank) of FIELD=us values, in ms
stats() {
	sed -n "s/.*$2=\([0-9]*\).*/\1/p" "$1" | sort -n | awk '{v[NR]=$1} END {
		if (NR == 0) { print "n/a"; exit }
		m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		p = int(0.99 * NR + 0.999999); if (p < 1) p = 1; if (p > NR) p = NR
		printf "median %.2f ms, p99 %.2f ms (n=%d)", m / 1000, v[p] / 1000, NR }'
}

# baseline LIVE: SAMPLES times ip netns add + ip link add veth (peer into the ns) + nft add table, and back
baseline() {
	local out=$LAB_DIR/base.$1 i a b c
	: >"$out"
	for i in $(seq 1 "$SAMPLES"); do
		a=$EPOCHREALTIME
		ip netns add "b$i" && ip link add "bv$i" type veth peer name eth0 netns "b$i" &&
			nft add table inet "bench$i"
		b=$EPOCHREALTIME
		nft delete table inet "bench$i"; ip link del "bv$i"; ip netns del "b$i"
		c=$EPOCHREALTIME
		echo "setup_us=$(((${b/./} - ${a/./}))) teardown_us=$(((${c/./} - ${b/./})))" >>"$out"
	done
}

RUNS=${RUNS:-3}
JSON_OUT=${JSON_OUT:-$SLUICE_BUILD_DIR/bench-netd.json}
echo "# sluiced session setup/teardown vs. the CLI tools, $SAMPLES samples each, $RUNS runs, $(nproc) CPUs"
for live in ${LIVES:-1 100 1000}; do # LIVES="..." picks other levels
	read -r la1 la5 la15 _ </proc/loadavg
	echo "$la1 $la5 $la15" >"$LAB_DIR/load.$live"
	for run in $(seq 1 "$RUNS"); do
		out=$LAB_DIR/sl.$live.$run
		if [ -n "${PERF_OUT:-}" ] && [ "$run" = 1 ]; then # perf record -g of sluiced and its engine
			spid=$(lab_pid sluiced)
			perf record -q -g ${PERF_EVENTS:+-e "$PERF_EVENTS"} -o "$PERF_OUT.$live" -p "$spid,$(pgrep -P "$spid" | paste -sd,)" >/dev/null 2>&1 &
			perfpid=$!
			sleep 0.5
		elif [ -n "${STRACE_OUT:-}" ] && [ "$run" = 1 ]; then # strace -f -T (wall time per call) of sluiced
			strace -q -f -T -tt -o "$STRACE_OUT.$live" -p "$(lab_pid sluiced)" &
			perfpid=$!
			sleep 0.5
		fi
		# the client reads the CPU time of sluiced and its engine around the samples alone
		NETD_BENCH_PIDS="$(lab_pid sluiced) $(pgrep -P "$(lab_pid sluiced)" | paste -sd' ')" \
			"$CLIENT" bench "$live" "$SAMPLES" "$LAB_DIR/ns" "$POLICY" >"$out" 2>"$out.err" ||
			{ echo "# bench at $live live sessions failed: $(tail -n 3 "$out.err")"; rm -f "$out"; }
		sed -n 's/^cpu_us_per_sample=//p' "$out" 2>/dev/null | awk '{ printf "%.3f\n", $1 / 1000 }' >"$out.cpu"
		if [ -n "${PERF_OUT:-}${STRACE_OUT:-}" ] && [ "$run" = 1 ]; then kill -INT "$perfpid"; wait "$perfpid"; fi
		[ -f "$out" ] && echo "live=$live run=$run sluiced setup: $(stats "$out" setup_us); teardown: $(stats "$out" teardown_us); CPU $(cat "$out.cpu") ms/sample; load $la1"
		t0=$EPOCHREALTIME
		for i in $(seq 2400); do [ "$(ip -o link 2>/dev/null | grep -c ' sl-')" -eq 0 ] && break; sleep 0.05; done
		echo "# the $live sessions' links were deleted $(awk "BEGIN{printf \"%.1f\", $EPOCHREALTIME - $t0}") s after their launchers closed"
	done
	# the CLI baseline while the same number of sessions is live
	"$CLIENT" many "$live" "$LAB_DIR/ns" "$POLICY" >"$LAB_DIR/hold.$live" 2>&1 &
	hp=$!
	for i in $(seq 2000); do [ "$(grep -c setup_us "$LAB_DIR/hold.$live")" -ge "$live" ] && break; sleep 0.05; done
	baseline "$live"
	echo "live=$live CLI     setup: $(stats "$LAB_DIR/base.$live" setup_us); teardown: $(stats "$LAB_DIR/base.$live" teardown_us)"
	if [ "$live" = 1000 ]; then
		echo "# with 1000 live sessions: $(ip -o link 2>/dev/null | grep -c ' sl-') sl-* links, $(nft list set inet sluice src4 | grep -o 'sl-' | wc -l) anti-spoofing elements, $(ip -6 route show table all 2>/dev/null | wc -l) IPv6 routes"
		echo "# session 999 reaches the proxy: $(ip netns exec n999 curl -s -m 2 --noproxy '*' http://100.64.0.1:3128/ | head -c 60)"
	fi
	kill -TERM "$hp"; wait "$hp"
	for i in $(seq 400); do [ "$(ip -o link 2>/dev/null | grep -c ' sl-')" -eq 0 ] && break; sleep 0.05; done
done

# the summary: per level, the median over the runs of each run's p50 and p99 (and of the CPU per session)
"$LAB_PYTHON" - "$LAB_DIR" "$JSON_OUT" "$SAMPLES" "$RUNS" "${LIVES:-1 100 1000}" <<'PY'
import json, os, re, statistics, sys, time
lab, out, samples, runs, lives = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5].split()

def vals(path, field):
    v = []
    for line in open(path):
        m = re.search(r"\b%s=(\d+)" % field, line)
        if m:
            v.append(int(m.group(1)) / 1000.0)
    return sorted(v)

def pct(v, p):  # nearest rank, as the shell summary (which gives the median as it is for an even count)
    if not v:
        return None
    if p == 50:
        return statistics.median(v)
    k = max(1, min(len(v), int(p / 100.0 * len(v) + 0.999999)))
    return v[k - 1]

def med(xs):
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 3) if xs else None

res = {"benchmark": "bench-netd", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
       "cpus": os.cpu_count(), "samples": samples, "runs": runs, "levels": []}
print("# summary: median over %d runs of each run's p50/p99 (ms), CPU ms per sample (sluiced + engine, setup and teardown)" % runs)
for live in lives:
    lvl = {"live": int(live), "loadavg": [float(x) for x in open("%s/load.%s" % (lab, live)).read().split()],
           "runs": []}
    for r in range(1, runs + 1):
        f = "%s/sl.%s.%d" % (lab, live, r)
        if not os.path.exists(f):
            continue
        s, t = vals(f, "setup_us"), vals(f, "teardown_us")
        lvl["runs"].append({"setup_p50_ms": pct(s, 50), "setup_p99_ms": pct(s, 99), "teardown_p50_ms": pct(t, 50),
                            "teardown_p99_ms": pct(t, 99), "n": len(s),
                            "cpu_ms_per_sample": (lambda t: float(t) if t.strip() else None)(open(f + ".cpu").read())})
    for k in ("setup_p50_ms", "setup_p99_ms", "teardown_p50_ms", "teardown_p99_ms", "cpu_ms_per_sample"):
        lvl[k] = med([x[k] for x in lvl["runs"]])
    b = "%s/base.%s" % (lab, live)
    if os.path.exists(b):
        s, t = vals(b, "setup_us"), vals(b, "teardown_us")
        lvl["cli"] = {"setup_p50_ms": pct(s, 50), "setup_p99_ms": pct(s, 99), "teardown_p50_ms": pct(t, 50),
                      "teardown_p99_ms": pct(t, 99)}
    res["levels"].append(lvl)
    print("live=%-5s setup p50 %s ms, p99 %s ms; teardown p50 %s ms, p99 %s ms; CPU %s ms/sample; load %s"
          % (live, lvl["setup_p50_ms"], lvl["setup_p99_ms"], lvl["teardown_p50_ms"], lvl["teardown_p99_ms"],
             lvl["cpu_ms_per_sample"], " ".join(str(x) for x in lvl["loadavg"])))
with open(out, "w") as fh:
    json.dump(res, fh, indent=1)
print("# JSON: %s" % out)
PY
lab_stop sluiced
