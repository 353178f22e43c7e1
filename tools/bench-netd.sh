#!/usr/bin/env bash
# Benchmark of sluiced session setup/teardown (not part of the test suite). Runs inside a lab (a private
# network+mount+pid namespace: nothing touches the machine's own network). For 1, 100 and 1000 live sessions
# it opens SAMPLES more sessions one at a time and ends each (END is answered after teardown), and in the same
# run times the command-line baseline: `ip netns add` + `ip link add veth ... netns` + `nft add table`
# (and their deletion). Prints median and p99 in ms.
#   usage: tools/bench-netd.sh [BUILD_DIR] [SAMPLES]
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
export SLUICE_SOURCE_DIR=${SLUICE_SOURCE_DIR:-$src}
export SLUICE_BUILD_DIR=${SLUICE_BUILD_DIR:-$(cd "${1:-$src/build}" && pwd)}
SAMPLES=${2:-${SAMPLES:-50}}
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

echo "# sluiced session setup/teardown vs. the CLI tools, $SAMPLES samples each, $(nproc) CPUs"
printf '%-6s | %-44s | %-44s\n' live "sluiced setup" "sluiced teardown"
for live in ${LIVES:-1 100 1000}; do # LIVES="..." picks other levels
	"$CLIENT" bench "$live" "$SAMPLES" "$LAB_DIR/ns" "$POLICY" >"$LAB_DIR/sl.$live" 2>"$LAB_DIR/sl.$live.err" ||
		{ echo "# bench at $live live sessions failed: $(tail -n 3 "$LAB_DIR/sl.$live.err")"; continue; }
	echo "live=$live sluiced setup: $(stats "$LAB_DIR/sl.$live" setup_us); teardown: $(stats "$LAB_DIR/sl.$live" teardown_us)"
	t0=$EPOCHREALTIME
	for i in $(seq 2400); do [ "$(ip -o link 2>/dev/null | grep -c ' sl-')" -eq 0 ] && break; sleep 0.05; done
	echo "# the $live sessions' links were deleted $(awk "BEGIN{printf \"%.1f\", $EPOCHREALTIME - $t0}") s after their launchers closed"
	# the CLI baseline while the same number of sessions is live
	"$CLIENT" many "$live" "$LAB_DIR/ns" "$POLICY" >"$LAB_DIR/hold.$live" 2>&1 &
	hp=$!
	for i in $(seq 2000); do [ "$(grep -c setup_us "$LAB_DIR/hold.$live")" -ge "$live" ] && break; sleep 0.05; done
	baseline "$live"
	echo "live=$live CLI     setup: $(stats "$LAB_DIR/base.$live" setup_us); teardown: $(stats "$LAB_DIR/base.$live" teardown_us)"
	if [ "$live" = 1000 ]; then
		echo "# with 1000 live sessions: $(ip -o link 2>/dev/null | grep -c ' sl-') sl-* links, $(nft list set inet sluice src4 | grep -o 'sl-' | wc -l) anti-spoofing elements"
		echo "# session 999 reaches the proxy: $(ip netns exec n999 curl -s -m 2 --noproxy '*' http://100.64.0.1:3128/ | head -c 60)"
	fi
	kill -TERM "$hp"; wait "$hp"
	for i in $(seq 400); do [ "$(ip -o link 2>/dev/null | grep -c ' sl-')" -eq 0 ] && break; sleep 0.05; done
done
lab_stop sluiced
