# shellcheck shell=bash disable=SC2154 # (conns, secs, src, GW, ...: bench-proxy.sh's, which sources this)
# Sourced by tools/bench-proxy.sh under BENCH_MACHINE=DIR (with BENCH_ONLY=http), inside its lab, with its
# contenders started: where the whole machine's CPU goes per keep-alive request (wrk -c$conns), through
# sluice-proxy and on the direct path (and through BENCH_AB's build, "B", when that is set too), not only
# the proxy's. Per contender, BENCH_ROUNDS rounds (rotating) of BENCH_SECONDS, each measuring per request:
#   - the CPU time (ns, /proc/PID/task/*/schedstat) of wrk, of the origin and of the proxy: on a veth pair
#     the kernel's work for a packet (the receiver's TCP input, softirq) runs in the sender's system call,
#     so it is in these figures; and the machine's softirq ticks outside them (/proc/stat: idle or other
#     tasks; machine-wide, so other work on a shared machine adds to it)
#   - context switches of each (voluntary and not, summed over threads)
#   - TCP segments in and out, pure ACKs, delayed ACKs, ... in each namespace (nstat: the session s1, the
#     host, the internet inet); "ctx" and segments do not move with the machine's load
#   - system calls of the proxy and of the origin (strace -c, in a separate run: it slows them down)
# then one perf record -a -g run per contender (DIR/perf-machine-NAME.data) summarised by command and by
# kernel area. Prints the medians; writes every run's figures to DIR/machine.txt.
# BENCH_MACHINE_BULK=connect|length|chunked: the unit of work is instead a bulk download of BENCH_BULK_MIB
# by curl (bench-proxy.sh's bulk rows), the figures per GiB (CPU in s/GiB; no strace run; the perf run
# records one whole download, and perf-areas' "per request" is then per GiB). A
# contender with a trailing p (BENCH_MACHINE_WHO="3128 3128p direct") runs with its proxy pinned to the
# last CPU (taskset, unpinned after the run): an experiment on what the scheduler's moves cost, never a
# product setting.
[ "${BENCH_ONLY:-}" = http ] || lab_bail "BENCH_MACHINE needs BENCH_ONLY=http"
mdir=$BENCH_MACHINE
mkdir -p "$mdir" || lab_bail "cannot make $mdir"
if [ -n "${BENCH_AB:-}" ]; then
	sed -e 's/:3128"/:3131"/g' -e '/"kind": "dns"/s/:53"/:5354"/' -e "s|\"audit_log\": \"[^\"]*\"|\"audit_log\": \"$PROXY_AUDIT.b\"|" \
		"$LAB_DIR/proxy/config-s1.json" >"$LAB_DIR/proxy/config-b.json"
	lab_bg proxyb "$BENCH_AB/proxy/sluice-proxy" --config "$LAB_DIR/proxy/config-b.json"
	lab_wait_port s1 "$GW" 3131 5 || lab_bail "the B sluice-proxy ($BENCH_AB) did not start"
	PIDNAME[3131]=proxyb
	mnames=(3128 3131 direct)
	# BENCH_MACHINE_B_BATCH=1: B's threads under SCHED_BATCH (an experiment: no wake-up preemption by it)
	[ -z "${BENCH_MACHINE_B_BATCH:-}" ] || chrt -b -a -p 0 "$(lab_pid proxyb)" || lab_bail "chrt failed"
else
	mnames=(3128 direct)
fi
declare -A MN=([3128]=sluice [3131]=B [direct]=direct [3129]=squid [3128d]=sluice-luareq [3128n]=sluice-nft
	[directn]=direct-nft [3131n]=B-nft [3128t]=sluice-nft-notrack [3128p]=sluice-pinned [3131p]=B-pinned)
# BENCH_MACHINE_WHO: the contenders instead (ports; "direct"; 3128d: sluice with wrk's old per-request Lua;
# a trailing n: with sluiced's ruleset in the host namespace, below; 3128t: that ruleset and the proxy's
# upstream hop not tracked by conntrack, an experiment measuring what tracking it costs)
[ -z "${BENCH_MACHINE_WHO:-}" ] || read -r -a mnames <<<"$BENCH_MACHINE_WHO"
origin_pid=$(lab_pid origin)

# task_ns PID: CPU time of all the threads of PID, ns; ctx_of PID: their context switches
task_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%.0f\n", s }'; }
ctx_of() {
	cat /proc/"$1"/task/*/status 2>/dev/null |
		awk '/^voluntary_ctxt_switches/ { v += $2 } /^nonvoluntary_ctxt_switches/ { n += $2 } END { print v + 0, n + 0 }'
}
rusage_py='import resource, subprocess, sys
subprocess.run(sys.argv[1:])
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print("RUSAGE", round((r.ru_utime + r.ru_stime) * 1e9), r.ru_nvcsw + r.ru_nivcsw)'
softirq_ticks() { awk '/^cpu / { print $8 }' /proc/stat; }
nstat_all() { lab_exec "$1" nstat -asz 2>/dev/null | awk 'NF >= 2 && $1 !~ /^#/ { print $1, $2 }'; }

# nft_on / nft_off: sluiced's ruleset (netd/nft.c, docs/netd.md "nftables: table inet sluice") in the
# lab's host namespace, with this lab's session interface (sess1) for sluiced's "sl-*" and the
# session's elements (its address, the proxies' ports, and a direct-mode element for the origin, so that
# the direct path is forwarded as sluice's direct mode would): what a real deployment evaluates per
# packet, conntrack included. The lab has no ruleset otherwise.
nft_on() {
	lab_exec host nft -f - <<-EOF || lab_bail "cannot load the ruleset"
		table inet sluicebench {
			set gateways4 { type ipv4_addr; elements = { $GW } }
			set gateways6 { type ipv6_addr; }
			set src4 { type ifname . ipv4_addr; elements = { "sess1" . $S_ADDR } }
			set src6 { type ifname . ipv6_addr; }
			set svc4 { type ifname . ipv4_addr . inet_proto . inet_service
				elements = { "sess1" . $GW . tcp . 3128, "sess1" . $GW . tcp . 3131, "sess1" . $GW . udp . 53 } }
			set svc6 { type ifname . ipv6_addr . inet_proto . inet_service; }
			map tredir { type ifname . inet_service : inet_service; }
			set direct4 { type ifname . ipv4_addr . inet_proto . inet_service; flags timeout
				elements = { "sess1" . $LAB_ALLOWED4 . tcp . $ORIGIN_PORT timeout 1h } }
			set direct6 { type ifname . ipv6_addr . inet_proto . inet_service; flags timeout; }
			chain input {
				type filter hook input priority filter - 10; policy accept;
				iifname "sess*" jump session_in
				ip daddr @gateways4 counter drop
				ip6 daddr @gateways6 counter drop
			}
			chain forward {
				type filter hook forward priority filter - 10; policy accept;
				iifname "sess*" jump session_fwd
				oifname "sess*" ct state established,related accept
				oifname "sess*" counter drop
			}
			chain session_in {
				icmpv6 type 135-136 ip6 hoplimit 255 accept
				meta pkttype != host counter drop
				iifname . ip saddr != @src4 counter drop
				iifname . ip6 saddr != @src6 counter drop
				ct state established,related accept
				iifname . ip daddr . meta l4proto . th dport @svc4 counter accept
				iifname . ip6 daddr . meta l4proto . th dport @svc6 counter accept
				counter drop
			}
			chain session_fwd {
				iifname . ip saddr != @src4 counter drop
				iifname . ip6 saddr != @src6 counter drop
				ct state established,related accept
				iifname . ip daddr . meta l4proto . th dport @direct4 counter accept
				iifname . ip6 daddr . meta l4proto . th dport @direct6 counter accept
				counter drop
			}
			chain prerouting {
				type nat hook prerouting priority dstnat; policy accept;
				iifname "sess*" meta l4proto tcp counter redirect to :iifname . tcp dport map @tredir
			}
		}
	EOF
}
nft_off() { lab_exec host nft delete table inet sluicebench 2>/dev/null || true; }
# nft_on_notrack: nft_on, and the host's own connections to the origin (the proxies' upstream hop) not
# tracked: the measure of what conntrack costs there (sluiced's ruleset has no such rule)
nft_on_notrack() {
	nft_on
	lab_exec host nft -f - <<-EOF || lab_bail "cannot load the notrack chains"
		table inet sluicebench {
			chain raw_out {
				type filter hook output priority raw; policy accept;
				oifname "inet0" ip daddr $LAB_ALLOWED4 tcp dport $ORIGIN_PORT notrack
			}
			chain raw_pre {
				type filter hook prerouting priority raw; policy accept;
				iifname "inet0" ip saddr $LAB_ALLOWED4 tcp sport $ORIGIN_PORT notrack
			}
		}
	EOF
}

# wrk_args WHO SECONDS: sets WRK_ARGS to wrk's arguments for a contender (3128d: through 3128 with a Lua
# request function)
wrk_args() {
	WRK_ARGS=(-t 2 -c "$conns" -d "$2s")
	case $1 in
	direct | directn) WRK_ARGS+=("http://$LAB_ALLOWED4:$ORIGIN_PORT/") ;;
	*d) WRK_ARGS+=(-s "$LAB_DIR/proxy-dynamic.lua" "http://$GW:${1%d}/") ;;
	*) WRK_ARGS+=(-s "$LAB_DIR/proxy.lua" "http://$GW:${1%[ntp]}/") ;;
	esac
}
# ruleset_on WHO: loads the ruleset a contender runs with (a trailing n or, on a port, t; not "direct"'s t)
ruleset_on() {
	case $1 in *n) nft_on ;; [0-9]*t) nft_on_notrack ;; esac
}
# proxy_of WHO: the pid of a contender's proxy (nothing for the direct path)
proxy_of() { [ "${1%n}" = direct ] || lab_pid "${PIDNAME[${1%[dntp]}]}"; }
# bulk_args WHO: sets BULK_ARGS to curl's arguments for BENCH_MACHINE_BULK's download through a contender
bulk_args() {
	local url=http://allowed.test:$ORIGIN_PORT/bytes/$bulk_bytes
	[ "$BENCH_MACHINE_BULK" = chunked ] && url=http://allowed.test:$ORIGIN_PORT/chunked/$bulk_bytes
	BULK_ARGS=(curl -sS -o /dev/null -w 'BULK %{speed_download} %{size_download}\n')
	case $1 in
	direct | directn) BULK_ARGS+=(--noproxy '*' --resolve "allowed.test:$ORIGIN_PORT:$LAB_ALLOWED4" "$url") ;;
	*) BULK_ARGS+=($([ "$BENCH_MACHINE_BULK" = connect ] && echo -p) -x "http://$GW:${1%[ntp]}" --noproxy '' "$url") ;;
	esac
}
last_cpu=$(($(nproc) - 1))

# machine_run PORT|direct ROUND: one wrk run with the counters; appends "key value" lines to machine.txt
machine_run() {
	local where=$1 round=$2 ppid=0 p0=0 o0 s0 ns ctxp0="0 0" ctxo0 n wns wctx v nv v0 nv0
	[ "${where%n}" = direct ] || ppid=$(proxy_of "$where")
	# (every connection made anew with the ruleset on or off: conntrack sees each from its start)
	ruleset_on "$where"
	for ns in s1 host inet; do nstat_all "$ns" >"$LAB_DIR/nstat0-$ns"; done
	[ "$ppid" = 0 ] || { p0=$(task_ns "$ppid"); ctxp0=$(ctx_of "$ppid"); }
	o0=$(task_ns "$origin_pid") ctxo0=$(ctx_of "$origin_pid") s0=$(softirq_ticks)
	[ "${where%p}" = "$where" ] || taskset -a -p -c "$last_cpu" "$ppid" >/dev/null || lab_bail "taskset failed"
	# wrk (or curl) under a wrapper that prints its CPU and context switches (getrusage of its child) after it
	if [ -n "${BENCH_MACHINE_BULK:-}" ]; then
		bulk_args "$where"
		lab_exec s1 "$LAB_PYTHON" -c "$rusage_py" "${BULK_ARGS[@]}" >"$LAB_DIR/wrk.out"
		# (a unit of work is a GiB; "rps" is MB/s)
		n=$(awk -v b="$bulk_bytes" '/^BULK / && $3 == b { printf "%.6f", b / 1073741824 }' "$LAB_DIR/wrk.out")
		rate=$(awk '/^BULK / { printf "%.0f", $2 / 1e6 }' "$LAB_DIR/wrk.out")
	else
		wrk_args "$where" "$secs"
		lab_exec s1 "$LAB_PYTHON" -c "$rusage_py" wrk "${WRK_ARGS[@]}" >"$LAB_DIR/wrk.out"
		n=$(awk '/requests in/ { print $1 }' "$LAB_DIR/wrk.out")
		rate=$(awk '/Requests\/sec/ { print $2 }' "$LAB_DIR/wrk.out")
	fi
	nft_off
	[ "${where%p}" = "$where" ] || taskset -a -p -c "0-$last_cpu" "$ppid" >/dev/null
	read -r _ wns wctx < <(grep '^RUSAGE ' "$LAB_DIR/wrk.out")
	{
		echo "run $round ${MN[$where]} requests ${n:-0}"
		echo "run $round ${MN[$where]} rps $rate"
		echo "run $round ${MN[$where]} cpu_ns_wrk $wns"
		echo "run $round ${MN[$where]} cpu_ns_origin $(($(task_ns "$origin_pid") - o0))"
		[ "$ppid" = 0 ] || echo "run $round ${MN[$where]} cpu_ns_proxy $(($(task_ns "$ppid") - p0))"
		echo "run $round ${MN[$where]} softirq_ticks $(($(softirq_ticks) - s0))"
		echo "run $round ${MN[$where]} ctx_wrk $wctx"
		read -r v nv <<<"$(ctx_of "$origin_pid")"
		read -r v0 nv0 <<<"$ctxo0"
		echo "run $round ${MN[$where]} ctx_origin $((v + nv - v0 - nv0))"
		echo "run $round ${MN[$where]} ctx_origin_invol $((nv - nv0))"
		if [ "$ppid" != 0 ]; then
			read -r v nv <<<"$(ctx_of "$ppid")"
			read -r v0 nv0 <<<"$ctxp0"
			echo "run $round ${MN[$where]} ctx_proxy $((v + nv - v0 - nv0))"
			echo "run $round ${MN[$where]} ctx_proxy_invol $((nv - nv0))"
		fi
		for ns in s1 host inet; do
			nstat_all "$ns" | awk -v f="$LAB_DIR/nstat0-$ns" -v p="run $round ${MN[$where]} $ns." '
				BEGIN { while ((getline l < f) > 0) { split(l, a, " "); b[a[1]] = a[2] } }
				{ d = $2 - b[$1]; if (d != 0) print p $1, d }'
		done
	} >>"$mdir/machine.txt"
}

: >"$mdir/machine.txt"
echo "# origin $origin; warming up; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for p in "${mnames[@]}"; do [ "${p%n}" = direct ] || wrk_run "${p%[dntp]}" 10 >/dev/null; done
# (the bench's lab has no nftables ruleset and no conntrack in any namespace: netd is not running)
for ns in host s1 inet; do
	echo "# nft rules in $ns: $(lab_exec "$ns" nft list ruleset 2>/dev/null | grep -c . || true) lines"
done
for ((round = 1; round <= ${BENCH_ROUNDS:-3}; round++)); do
	for ((k = 0; k < ${#mnames[@]}; k++)); do
		p=${mnames[(k + round) % ${#mnames[@]}]}
		machine_run "$p" "$round"
		echo "# round $round: ${MN[$p]}: $(awk -v w="${MN[$p]}" -v r="$round" '$2 == r && $3 == w && $4 == "rps" { print $5 }' "$mdir/machine.txt") $([ -n "${BENCH_MACHINE_BULK:-}" ] && echo MB/s || echo req/s)"
	done
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

# System calls per request of the proxy and the origin (strace -c: slows them, so a run of its own)
if command -v strace >/dev/null && [ -z "${BENCH_MACHINE_NOSTRACE:-}${BENCH_MACHINE_BULK:-}" ]; then
	for p in "${mnames[@]}"; do
		pids=("$origin_pid") tracers=()
		[ "${p%n}" = direct ] || pids+=("$(proxy_of "$p")")
		ruleset_on "$p"
		for pid in "${pids[@]}"; do
			timeout -s INT "$secs" strace -c -f -p "$pid" -o "$mdir/strace-${MN[$p]}-$pid.txt" >/dev/null 2>&1 &
			tracers+=($!)
		done
		sleep 0.3
		wrk_args "$p" "$((secs - 1))"
		lab_exec s1 wrk "${WRK_ARGS[@]}" >"$LAB_DIR/wrk.out"
		wait "${tracers[@]}"
		nft_off
		n=$(awk '/requests in/ { print $1 }' "$LAB_DIR/wrk.out")
		for pid in "${pids[@]}"; do
			who=origin
			[ "$pid" = "$origin_pid" ] || who=proxy
			# the total line is "100.00 SECONDS USECS/CALL CALLS [ERRORS] total": the calls are $4 either way
			awk -v n="$n" -v w="${MN[$p]}" -v who="$who" '$NF == "total" { printf "syscalls %s %s %.2f per request\n", w, who, $4 / n }
				$1 ~ /^[0-9.]+$/ && NF >= 5 && $NF != "total" { printf "syscall %s %s %s %.3f\n", w, who, $NF, $4 / n }' \
				"$mdir/strace-${MN[$p]}-$pid.txt" >>"$mdir/machine.txt"
		done
	done
fi

# A perf record -a -g run per contender (perf costs CPU itself: its own run)
if command -v perf >/dev/null && [ -z "${BENCH_MACHINE_NOPERF:-}" ] && [ -n "${BENCH_MACHINE_BULK:-}" ]; then
	# bulk: curl's download recorded whole (curl, the origin and the proxy), per GiB
	for p in "${mnames[@]}"; do
		ruleset_on "$p"
		[ "${p%p}" = "$p" ] || taskset -a -p -c "$last_cpu" "$(proxy_of "$p")" >/dev/null
		bulk_args "$p"
		ip netns exec s1 "${BULK_ARGS[@]}" >"$LAB_DIR/wrk.out" &
		wpid=$!
		plist=$wpid,$origin_pid
		[ "${p%n}" = direct ] || plist+=,$(proxy_of "$p")
		perf record -q -g -F 1999 -p "$plist" -o "$mdir/perf-machine-${MN[$p]}.data" >/dev/null 2>&1 &
		ppid=$!
		wait "$wpid"
		kill -INT "$ppid"
		wait "$ppid"
		nft_off
		[ "${p%p}" = "$p" ] || taskset -a -p -c "0-$last_cpu" "$(proxy_of "$p")" >/dev/null
		# (the unit: a GiB; perf-areas prints "per request", here per GiB, in microseconds)
		echo "perf ${MN[$p]} $(awk -v b="$bulk_bytes" '/^BULK / { printf "%.6f", $3 / 1073741824 }' "$LAB_DIR/wrk.out")" >>"$mdir/machine.txt"
	done
	chmod a+r "$mdir"/perf-machine-*.data 2>/dev/null
fi
if command -v perf >/dev/null && [ -z "${BENCH_MACHINE_NOPERF:-}${BENCH_MACHINE_BULK:-}" ]; then
	for p in "${mnames[@]}"; do
		ruleset_on "$p"
		wrk_args "$p" "$secs"
		ip netns exec s1 wrk "${WRK_ARGS[@]}" >"$LAB_DIR/wrk.out" &
		wpid=$! # (ip netns exec execs wrk: the same pid)
		plist=$wpid,$origin_pid
		[ "${p%n}" = direct ] || plist+=,$(proxy_of "$p")
		sleep 0.5
		# the three processes only (-a would take other sessions' work on a shared machine)
		perf record -q -g -F 1999 -p "$plist" -o "$mdir/perf-machine-${MN[$p]}.data" -- sleep "$((secs - 2))" >/dev/null 2>&1
		wait "$wpid"
		nft_off
		# (the requests of the recorded seconds: wrk's rate over them)
		echo "perf ${MN[$p]} $(awk -v s=$((secs - 2)) '/Requests\/sec/ { printf "%.0f", $2 * s }' "$LAB_DIR/wrk.out")" >>"$mdir/machine.txt"
	done
	chmod a+r "$mdir"/perf-machine-*.data 2>/dev/null
fi

# The medians per request (per GiB with BENCH_MACHINE_BULK)
BULK=${BENCH_MACHINE_BULK:-} "$LAB_PYTHON" - "$mdir/machine.txt" <<'PY'
import os, statistics, sys, collections
bulk = bool(os.environ.get("BULK"))
runs = collections.defaultdict(lambda: collections.defaultdict(dict))
sysc = []
for line in open(sys.argv[1]):
    f = line.split()
    if f[0] == "run":
        runs[f[2]][int(f[1])][f[3]] = float(f[4])
    elif f[0] in ("syscalls", "syscall"):
        sysc.append(line.rstrip())
def per(who, key, scale=1.0):
    v = [r[key] / r["requests"] * scale for r in runs[who].values() if key in r and r.get("requests")]
    return statistics.median(v) if v else None
names = list(runs)
keys = ["rps", "cpu_ns_wrk", "cpu_ns_origin", "cpu_ns_proxy", "softirq_ticks", "ctx_wrk", "ctx_origin", "ctx_origin_invol",
        "ctx_proxy", "ctx_proxy_invol"]
print(f"{('per GiB' if bulk else 'per request') + ' (median of rounds)':44}" + "".join(f"{n:>12}" for n in names))
for k in keys:
    row = []
    for n in names:
        if k == "rps":
            v = [r["rps"] for r in runs[n].values() if "rps" in r]
            row.append(statistics.median(v) if v else None)
        elif k.startswith("cpu_ns"):
            row.append(per(n, k, 1e-9 if bulk else 1e-3))
        elif k == "softirq_ticks":
            row.append(per(n, k, 0.01 if bulk else 1e6 / 100))  # ticks of 10 ms -> s or us
        else:
            row.append(per(n, k))
    label = {"rps": "MB/s" if bulk else "req/s",
             "softirq_ticks": f"softirq {'s' if bulk else 'us'}, machine-wide (/proc/stat)"}.get(
                 k, k.replace("cpu_ns_", "CPU s " if bulk else "CPU us ").replace("wrk", "curl" if bulk else "wrk"))
    print(f"{label:44}" + "".join(f"{'-' if v is None else f'{v:.3f}':>12}" for v in row))
tot = []
for n in names:
    t = sum(per(n, k, 1e-9 if bulk else 1e-3) or 0 for k in ("cpu_ns_wrk", "cpu_ns_origin", "cpu_ns_proxy"))
    tot.append(t)
print(f"{'CPU s curl+origin+proxy' if bulk else 'CPU us wrk+origin+proxy':44}" + "".join(f"{v:>12.3f}" for v in tot))
allk = sorted({k for n in names for r in runs[n].values() for k in r if "." in k})
for k in allk:
    row = [per(n, k) for n in names]
    if any(v is not None and abs(v) >= 0.005 for v in row):
        print(f"{k:44}" + "".join(f"{'-' if v is None else f'{v:.3f}':>12}" for v in row))
print()
print("\n".join(s for s in sysc if s.startswith("syscalls") or float(s.split()[-1]) >= 0.01))
PY
if command -v perf >/dev/null && [ -z "${BENCH_MACHINE_NOPERF:-}" ]; then
	for p in "${mnames[@]}"; do
		echo
		echo "== perf, ${MN[$p]} (wrk, the origin and the proxy; their kernel work included)"
		"$LAB_PYTHON" "$src/tools/perf-areas.py" "$mdir/perf-machine-${MN[$p]}.data" \
			"$(awk -v w="${MN[$p]}" '$1 == "perf" && $2 == w { print $3 }' "$mdir/machine.txt")" 1999
	done
fi
