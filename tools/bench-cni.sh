#!/usr/bin/env bash
# Benchmark of per-pod setup time through sluice-cni (not part of the test suite): the plugin driven as a
# runtime drives it (CNI_* environment, network configuration on stdin; the namespaces made with
# `ip netns add`, as a runtime makes them), against sluiced in a lab (a private network+mount+pid namespace:
# nothing touches the machine's own network). Times each ADD and DEL as the runtime sees it: the plugin's
# process start, building the policy (preset "registries" unless POLICY is given), sluiced's setup (nft
# elements, veth, addresses, routes, engine registration) and the reply.
#   1 container:    SAMPLES times ADD then DEL with no other container live
#   100 containers: 100 ADDs in a row (all kept: the fleet grows to 100), then SAMPLES ADD+DEL with 100 live
# Prints median and p99 (nearest rank) in ms.
#   usage: tools/bench-cni.sh [BUILD_DIR] [SAMPLES]
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
export SLUICE_SOURCE_DIR=${SLUICE_SOURCE_DIR:-$src}
export SLUICE_BUILD_DIR=${SLUICE_BUILD_DIR:-$(cd "${1:-$src/build}" && pwd)}
export SLUICE_PRESET_DIR=${SLUICE_PRESET_DIR:-$SLUICE_SOURCE_DIR/policy/presets}
SAMPLES=${2:-${SAMPLES:-50}}
LIVE=${LIVE:-100}
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/lab.sh"
lab_enter "$@"

PLUGIN=$SLUICE_BUILD_DIR/cni/sluice-cni
export SLUICE_RUN_DIR=/run/sluice
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
CONF='{"cniVersion": "1.0.0", "name": "bench", "type": "sluice-cni", "runDir": "/run/sluice", "policy": '${POLICY:-'"registries"'}'}'

lab_internet_up >/dev/null # the engine needs its upstream resolver
lab_bg sluiced "$SLUICE_BUILD_DIR/netd/sluiced" --run-dir /run/sluice --audit-log "$LAB_DIR/audit.log" \
	--pool4 100.64.0.0/16 --pool6 2001:db8:100::/64 --upstream-dns "$LAB_DNS"
for i in $(seq 200); do "$SLUICE_BUILD_DIR/tools/sluicectl/sluicectl" sessions >/dev/null 2>&1 && break; sleep 0.05; done

max=$((LIVE + 2 * SAMPLES))
for i in $(seq 0 $((max - 1))); do echo "netns add p$i"; done | ip -batch - || lab_bail "creating namespaces"

# cni CMD N: runs the plugin for container cN in netns pN; prints the microseconds it took (fails on error)
cni() {
	local a b out
	a=$EPOCHREALTIME
	out=$(printf '%s' "$CONF" | CNI_COMMAND=$1 CNI_CONTAINERID="c$2" CNI_NETNS="/run/netns/p$2" CNI_IFNAME=eth0 \
		CNI_PATH=/usr/lib/cni CNI_ARGS="K8S_POD_NAMESPACE=bench;K8S_POD_NAME=pod-$2" "$PLUGIN")
	local rc=$?
	b=$EPOCHREALTIME
	[ $rc -eq 0 ] || { echo "# $1 c$2 failed: $out" >&2; return 1; }
	echo $((${b/./} - ${a/./}))
}
# stats FILE: median and p99 (nearest rank) of microsecond values, in ms
stats() {
	sort -n "$1" | awk '{v[NR]=$1} END {
		if (NR == 0) { print "n/a"; exit }
		m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		p = int(0.99 * NR + 0.999999); if (p < 1) p = 1; if (p > NR) p = NR
		printf "median %6.2f ms, p99 %6.2f ms (n=%d)", m / 1000, v[p] / 1000, NR }'
}
# cycle FIRST OUT: SAMPLES times ADD then DEL of containers FIRST.., times into OUT.add / OUT.del
cycle() {
	local i n
	: >"$2.add"; : >"$2.del"
	for i in $(seq 0 $((SAMPLES - 1))); do
		n=$(($1 + i))
		cni ADD "$n" >>"$2.add" || return 1
		cni DEL "$n" >>"$2.del" || return 1
	done
}

echo "# sluice-cni per-pod setup (ADD) and teardown (DEL), $SAMPLES samples, $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg)"
echo "# policy: ${POLICY:-\"registries\"}"
cycle "$LIVE" "$LAB_DIR/one" || lab_bail "ADD/DEL with 1 container failed"
: >"$LAB_DIR/grow"
for i in $(seq 0 $((LIVE - 1))); do cni ADD "$i" >>"$LAB_DIR/grow" || lab_bail "ADD $i failed"; done
cycle $((LIVE + SAMPLES)) "$LAB_DIR/many" || lab_bail "ADD/DEL with $LIVE containers failed"
printf '%-32s | %s\n' "ADD, 1 container" "$(stats "$LAB_DIR/one.add")"
printf '%-32s | %s\n' "DEL, 1 container" "$(stats "$LAB_DIR/one.del")"
printf '%-32s | %s\n' "ADD, growing to $LIVE containers" "$(stats "$LAB_DIR/grow")"
printf '%-32s | %s\n' "ADD, $LIVE containers live" "$(stats "$LAB_DIR/many.add")"
printf '%-32s | %s\n' "DEL, $LIVE containers live" "$(stats "$LAB_DIR/many.del")"
echo "# live sessions at the end: $("$SLUICE_BUILD_DIR/tools/sluicectl/sluicectl" sessions | grep -c 'cni bench')"
lab_down 0 >/dev/null 2>&1
