#!/usr/bin/env bash
# Start-up benchmark of the launcher: `sluice run -- true` against bubblewrap and firejail doing
# the same (new namespaces, no network), with hyperfine. Prints hyperfine's table and the median
# of each, and the ratio sluice/bwrap (target: at most 1.5). Needs root for firejail's --net=none
# and for sluice's cgroup; run as a user it benchmarks the unprivileged (user namespace) path.
#   usage: tools/bench-sandbox.sh [BUILD_DIR] [RUNS] [ROUNDS]   (default: build, 200, 3)
# hyperfine runs one command's runs back to back, so load from other work on the machine lands on
# one command more than another: ROUNDS repeats the whole comparison and the summary reports each
# round's ratio and their median.
#
# Node-based wrappers (the requirement: start-up at least 20x faster than a Node-based sandbox
# wrapper's), timed in a second hyperfine run per round with SLOW_RUNS runs (they take seconds):
#   - "srt (sandbox-runtime)": Anthropic's sandbox-runtime, a Node program wrapping bwrap, as `srt true`
#     with its default settings (it starts its HTTP and SOCKS bridges). SLUICE_BENCH_SRT=PATH uses that
#     srt; otherwise it is installed with npm into the temporary work directory (never into the tree);
#     SLUICE_BENCH_SRT=none leaves it out. It needs node, socat and ripgrep (tools/deps.sh --bench).
#   - "node + bwrap": `node -e` spawning the same bwrap command as above through child_process: the
#     floor of any Node wrapper (the interpreter's start plus bwrap), measured when node is there.
#   SLUICE_BENCH_SLOW_RUNS (default 20) sets their runs.
#
# SLUICE_BENCH_NETWORK=1 (root) also times `sluice run --allow-network -- true` twice: through a running
# sluiced and with the embedded helper (no daemon). For that the whole benchmark runs in a lab of
# network namespaces (tests/lib/lab.sh: no route leaves it) where sluiced is started.
#
# SLUICE_BENCH_CONTAINERS=1 (root, podman) adds the container types (issue 18) as slow rows, with the test
# image (tests/lib/ctr-image.sh, built once under BUILD/tests/ctr-image): `--sandbox-type container`,
# `--sandbox-type devcontainer` (a devcontainer.json naming that image), and `--allow-containers` as a fast
# row; with SLUICE_BENCH_NETWORK=1 also `--sandbox-type container --allow-network` through sluiced.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
runs=${2:-200}
rounds=${3:-3}
slow_runs=${SLUICE_BENCH_SLOW_RUNS:-20}
sluice="$build/sandbox/sluice"
for t in hyperfine bwrap firejail; do
	command -v "$t" >/dev/null || { echo "bench-sandbox: $t missing: tools/deps.sh --bench" >&2; exit 1; }
done
[ -x "$sluice" ] || { echo "bench-sandbox: $sluice not built" >&2; exit 1; }

if [ -n "${SLUICE_BENCH_NETWORK:-}" ]; then
	[ -x "$build/netd/sluiced" ] || { echo "bench-sandbox: $build/netd/sluiced not built" >&2; exit 1; }
	# lab_enter re-executes this script as pid 1 of fresh network, mount and pid namespaces.
	export SLUICE_SOURCE_DIR=$src SLUICE_BUILD_DIR=$build
	set +eu
	. "$src/tests/lib/tap.sh"
	. "$src/tests/lib/lab.sh"
	lab_enter "$@"
	set -eu
fi

work=$(mktemp -d)
if [ -n "${SLUICE_BENCH_NETWORK:-}" ]; then
	trap 'rm -rf "$work"; _lab_exit' EXIT # the lab's own trap stops sluiced and removes the lab
else
	trap 'rm -rf "$work"' EXIT
fi
cd "$work"
bwrap_args=(--unshare-all --die-with-parent --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib
	--symlink usr/lib64 /lib64 --ro-bind /etc /etc --dev /dev --proc /proc --tmpfs /tmp true)
cmds=(
	"$sluice run -- true"
	"bwrap ${bwrap_args[*]}"
	"firejail --quiet --noprofile --net=none true"
)
names=("sluice run" "bwrap --unshare-all" "firejail --net=none")
if [ -n "${SLUICE_BENCH_NETWORK:-}" ]; then
	# inside the lab's PID namespace firejail runs the command without its sandbox (its "existing sandbox"
	# check), so its time would mean nothing: compare it in a run without SLUICE_BENCH_NETWORK
	unset 'cmds[2]' 'names[2]'
	cmds=("${cmds[@]}") names=("${names[@]}")
fi

if [ -n "${SLUICE_BENCH_NETWORK:-}" ]; then
	# sluiced in the lab: its pool is CGNAT space, its upstream DNS an address nothing answers on (the
	# sessions run `true`); the embedded helper is what a client gets when the run dir has no socket.
	mkdir -p "$work/etc-sluice" "$work/no-daemon"
	lab_bg sluiced "$build/netd/sluiced" --run-dir /run/sluice --audit-log "$work/audit.log" \
		--pool4 100.64.0.0/16 --pool6 2001:db8:100::/64 --upstream-dns 198.18.0.53 --sysconfdir "$work/etc-sluice"
	for _ in $(seq 200); do
		grep -q "proxy engine .* running" "$(lab_log sluiced)" 2>/dev/null && break
		sleep 0.05
	done
	grep -q "proxy engine .* running" "$(lab_log sluiced)" ||
		{ echo "bench-sandbox: sluiced did not start: $(tail -n 5 "$(lab_log sluiced)")" >&2; exit 1; }
	cmds+=("env SLUICE_RUN_DIR=/run/sluice $sluice run --allow-network -- true"
		"env SLUICE_RUN_DIR=$work/no-daemon $sluice run --allow-network -- true")
	names+=("sluice run --allow-network (sluiced)" "sluice run --allow-network (embedded)")
fi

# The Node-based wrappers (and the container types).
slow_cmds=() slow_names=()
if [ -n "${SLUICE_BENCH_CONTAINERS:-}" ]; then
	export SLUICE_SOURCE_DIR=$src SLUICE_BUILD_DIR=$build
	command -v lab_bail >/dev/null || lab_bail() { echo "bench-sandbox: $*" >&2; exit 1; }
	. "$src/tests/lib/ctr-image.sh"
	ctr_image_ensure # exports CONTAINERS_STORAGE_CONF: sluice reads the image from that store
	mkdir -p "$work/dc/.devcontainer"
	printf '{ "image": "%s" }\n' "$CTR_IMAGE" >"$work/dc/.devcontainer/devcontainer.json"
	cmds+=("$sluice run --allow-containers -- true")
	names+=("sluice run --allow-containers")
	slow_cmds+=("$sluice run --sandbox-type container --image $CTR_IMAGE -- true"
		"env -C $work/dc $sluice run --sandbox-type devcontainer -- true")
	slow_names+=("sluice run --sandbox-type container" "sluice run --sandbox-type devcontainer")
	if [ -n "${SLUICE_BENCH_NETWORK:-}" ]; then
		slow_cmds+=("env SLUICE_RUN_DIR=/run/sluice $sluice run --sandbox-type container --image $CTR_IMAGE --allow-network -- true")
		slow_names+=("sluice run --sandbox-type container --allow-network (sluiced)")
	fi
fi
srt=${SLUICE_BENCH_SRT:-}
if [ -z "$srt" ] && command -v npm >/dev/null; then
	if timeout 300 npm install --no-audit --no-fund --silent --prefix "$work/srt" @anthropic-ai/sandbox-runtime \
		>"$work/npm.log" 2>&1; then
		srt=$work/srt/node_modules/.bin/srt
	else
		echo "bench-sandbox: could not install @anthropic-ai/sandbox-runtime (see below); leaving it out" >&2
		tail -n 5 "$work/npm.log" >&2
	fi
fi
if [ -n "$srt" ] && [ "$srt" != none ]; then
	mkdir -p "$work/srt-home"
	if HOME=$work/srt-home "$srt" true >"$work/srt-check.log" 2>&1; then
		slow_cmds+=("env HOME=$work/srt-home $srt true")
		slow_names+=("srt (sandbox-runtime)")
	else
		echo "bench-sandbox: srt does not run here, leaving it out: $(tail -n 3 "$work/srt-check.log")" >&2
	fi
fi
if command -v node >/dev/null; then
	js="process.exit(require('child_process').spawnSync('bwrap', process.argv.slice(1), {stdio: 'inherit'}).status)"
	slow_cmds+=("node -e \"$js\" -- ${bwrap_args[*]}")
	slow_names+=("node + bwrap")
fi

args=()
for i in "${!cmds[@]}"; do args+=(-n "${names[$i]}" "${cmds[$i]}"); done
slow_args=()
for i in "${!slow_cmds[@]}"; do slow_args+=(-n "${slow_names[$i]}" "${slow_cmds[$i]}"); done
for r in $(seq "$rounds"); do
	echo "== round $r of $rounds"
	hyperfine -N --warmup 10 --runs "$runs" --export-json "$work/r$r.json" "${args[@]}"
	if [ "${#slow_args[@]}" -gt 0 ]; then
		hyperfine -N --warmup 2 --runs "$slow_runs" --export-json "$work/s$r.json" "${slow_args[@]}"
	fi
done
if [ -n "${SLUICE_BENCH_NETWORK:-}" ]; then
	# the "(sluiced)" row must really have gone through the daemon, not fallen back to the embedded helper
	served=$(grep -cE 'session [0-9a-f]+: uid' "$(lab_log sluiced)" || true)
	echo "sluiced served $served sessions"
	[ "$served" -gt 0 ] || { echo "bench-sandbox: sluiced served no session: the (sluiced) row is wrong" >&2; exit 1; }
fi
python3 - "$work" "$rounds" <<'PY'
import json, os, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
ratios, med = [], {}
for r in range(1, rounds + 1):
    res = {x["command"]: x for x in json.load(open(f"{work}/r{r}.json"))["results"]}
    if os.path.exists(f"{work}/s{r}.json"):
        res.update({x["command"]: x for x in json.load(open(f"{work}/s{r}.json"))["results"]})
    for name, x in res.items():
        med.setdefault(name, []).append(x["median"] * 1000)
    ratios.append(res["sluice run"]["median"] / res["bwrap --unshare-all"]["median"])
for name, ms in med.items():
    print(f"{name:38s} median per round: " + ", ".join(f"{m:7.2f}" for m in ms) + " ms")
print("sluice/bwrap median ratio per round: " + ", ".join(f"{x:.2f}" for x in ratios))
print(f"sluice/bwrap median ratio (median of rounds): {statistics.median(ratios):.2f} (target <= 1.50)")
base = statistics.median(med["sluice run"])
for name in ("srt (sandbox-runtime)", "node + bwrap"):
    if name in med:
        print(f"{name} / sluice run (medians of rounds): {statistics.median(med[name]) / base:.1f}x (target >= 20)")
for name in ("sluice run --allow-network (sluiced)", "sluice run --allow-network (embedded)",
             "sluice run --allow-containers", "sluice run --sandbox-type container",
             "sluice run --sandbox-type devcontainer",
             "sluice run --sandbox-type container --allow-network (sluiced)"):
    if name in med:
        print(f"{name}: {statistics.median(med[name]):.1f} ms, {statistics.median(med[name]) / base:.1f}x sluice run")
PY
